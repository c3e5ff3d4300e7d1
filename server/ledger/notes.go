package ledger

import (
	"context"
)

// WithNote returns ctx carrying note, for [Ledger.Commit]: with the
// embedded store, note is called once per commit that charges anything,
// before the store's lock is taken, and what it returns (at most 8 KiB;
// longer, or nil, journals none) is written in the commit's journal
// record, in the same write(2), so that it survives whatever kills the
// process after the commit; the bytes are copied, not kept once Commit
// returns. A later open hands the notes of the records
// still in the journal to [EmbeddedOptions.Notes]. The gateway's note is
// the call's audit line, so that a crash between the commit and the
// audit write loses neither. The Redis store with local files
// ([RedisOptions.Path]) writes the note, under the commit's id, in its
// notes file before the commit runs in Redis, and hands those of the
// commits Redis holds to [RedisOptions.Notes] at its next open; without
// local files it ignores notes.
func WithNote(ctx context.Context, note func() []byte) context.Context {
	return context.WithValue(ctx, noteKey{}, note)
}

type noteKey struct{}

// noteOf calls the note ctx carries; nil when none.
func noteOf(ctx context.Context) []byte {
	f, _ := ctx.Value(noteKey{}).(func() []byte)
	if f == nil {
		return nil
	}
	n := f()
	if len(n) > maxNote {
		return nil
	}
	return n
}

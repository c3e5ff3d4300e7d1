package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/ledger"
)

// ledgerInit writes the marker of a new Redis ledger. It refuses an
// embedded store (which needs no initialisation) and says whether the
// marker was already there. A Redis that lost its data gets a new marker
// too: restore its data first if you have it.
func ledgerInit(ctx context.Context, path string, stdout, stderr io.Writer) error {
	cfg, _, err := loadConfig(path, stderr)
	if err != nil {
		return err
	}
	s := cfg.AI.Budget.Store
	if s.Type != config.StoreRedis {
		fmt.Fprintf(stderr, "flexway ledger init: ai.budget.store.type is %s; only a redis ledger needs initialising\n", s.Type)
		return errSilent
	}
	created, err := ledger.InitRedis(ctx, s.URL)
	if err != nil {
		fmt.Fprintf(stderr, "flexway ledger init: %v\n", err)
		return errSilent
	}
	if created {
		fmt.Fprintln(stdout, "flexway ledger init: marker written; the Redis ledger is ready")
	} else {
		fmt.Fprintln(stdout, "flexway ledger init: the Redis ledger was already initialised; nothing changed")
	}
	return nil
}

// ledgerAcceptRollback accepts the Redis ledger's current state after a
// rollback was reported (Redis lost commits replicas had seen): it starts
// a new epoch of the commit sequence, so that replicas meter again from
// what Redis holds now. It says what it found; the commits Redis lost are
// not brought back (restore them from a backup first if you have one).
func ledgerAcceptRollback(ctx context.Context, path string, stdout, stderr io.Writer) error {
	cfg, _, err := loadConfig(path, stderr)
	if err != nil {
		return err
	}
	s := cfg.AI.Budget.Store
	if s.Type != config.StoreRedis {
		fmt.Fprintf(stderr, "flexway ledger accept-rollback: ai.budget.store.type is %s; only a redis ledger can be rolled back under its replicas\n", s.Type)
		return errSilent
	}
	found, epoch, err := ledger.AcceptRedisRollback(ctx, s.URL)
	if err != nil {
		fmt.Fprintf(stderr, "flexway ledger accept-rollback: %v\n", err)
		return errSilent
	}
	if f := strings.Fields(found.RolledBack); len(f) == 4 {
		fmt.Fprintf(stdout, "flexway ledger accept-rollback: Redis holds commit %d of epoch %d; a replica had seen commit %s of epoch %s: the commits between are lost\n", found.Seq, found.Epoch, f[3], f[2])
	} else {
		fmt.Fprintf(stdout, "flexway ledger accept-rollback: no replica had reported a rollback; Redis holds commit %d of epoch %d\n", found.Seq, found.Epoch)
	}
	fmt.Fprintf(stdout, "flexway ledger accept-rollback: accepted as it is (new epoch %d); replicas meter again from it at their next call, and replay the commits they journaled\n", epoch)
	return nil
}

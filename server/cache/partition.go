package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Partition is what a call must share with the call that filled an entry
// to find it (issue 18): tenant always; the resolved alias and arm; the
// plan's first backend and its model (the lookup comes before the call);
// the operation; and whether the call is sensitive, so that sensitive
// entries (include_sensitive, internal backends only) live apart. Empty
// fields are values like any other: an empty Arm is not a wildcard.
type Partition struct {
	// Tenant is the caller's tenant.
	Tenant string
	// Alias is the requested model or alias as resolved (the alias name,
	// or the model name when no alias matched); Arm is the canary or A/B
	// arm chosen, empty for none.
	Alias, Arm string
	// Backend and Model are the planned first backend's name and the
	// model sent to it.
	Backend, Model string
	// Operation is the call's operation (ai.chatCompletions).
	Operation string
	// Sensitive is set for a sensitive call.
	Sensitive bool
}

// PartitionID names a [Partition] in store keys: SHA-256 over its fields,
// each length-prefixed, so that no two partitions share an ID by
// concatenation ("ab"+"c" and "a"+"bc" differ).
type PartitionID [32]byte

// String is the ID in hex.
func (id PartitionID) String() string { return hex.EncodeToString(id[:]) }

// ID computes p's [PartitionID]; about 0.2 µs, once per call.
func (p Partition) ID() PartitionID {
	var buf [256]byte
	b := append(buf[:0], "flexway.cache.partition.v1"...)
	for _, s := range [...]string{p.Tenant, p.Alias, p.Arm, p.Backend, p.Model, p.Operation} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	if p.Sensitive {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return sha256.Sum256(b)
}

// StoreKey is the key of an entry in a store: the partition ID then the
// request key, 64 bytes.
type StoreKey [64]byte

// MakeStoreKey joins id and k.
func MakeStoreKey(id PartitionID, k Key) StoreKey {
	var sk StoreKey
	copy(sk[:32], id[:])
	copy(sk[32:], k[:])
	return sk
}

// Partition is the partition half of sk.
func (sk StoreKey) Partition() PartitionID { return PartitionID(sk[:32]) }

// Key is the request-key half of sk.
func (sk StoreKey) Key() Key { return Key(sk[32:]) }

// IndexName names the semantic index of a partition and a context key
// (see [Keys.Context]): the index holds the vectors of the last user
// messages of the requests that share everything else.
func IndexName(id PartitionID, context Key) Key {
	var b [64 + 16]byte
	n := copy(b[:], "flexway.idx.v1\x00\x00")
	n += copy(b[n:], id[:])
	copy(b[n:], context[:])
	return sha256.Sum256(b[:])
}

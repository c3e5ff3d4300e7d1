package jsonschema

import (
	"container/list"
	"crypto/sha256"
	"sync"
)

// CacheSize is how many compiled request schemas are kept (least recently
// used dropped first).
const CacheSize = 256

// maxCachedBytes is the largest schema, in bytes, kept in the cache: a
// larger one is compiled at each use (and is rare: 256 KiB of schema).
const maxCachedBytes = 256 << 10

// entry is a cached compile result: the schema, or the error.
type entry struct {
	s   *Schema
	err error
}

// lru is a bounded least-recently-used map of SHA-256 keys to compile
// results; safe for concurrent use.
type lru struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *item, most recent first
	items map[[sha256.Size]byte]*list.Element
}

type item struct {
	key [sha256.Size]byte
	e   entry
}

func newLRU(max int) *lru {
	return &lru{max: max, order: list.New(), items: make(map[[sha256.Size]byte]*list.Element, max)}
}

// cache holds the compiled schemas of [CompileJSON].
var cache = newLRU(CacheSize)

func (c *lru) get(k [sha256.Size]byte) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		return entry{}, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*item).e, true
}

func (c *lru) put(k [sha256.Size]byte, e entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		el.Value.(*item).e = e
		c.order.MoveToFront(el)
		return
	}
	c.items[k] = c.order.PushFront(&item{key: k, e: e})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*item).key)
	}
}

func (c *lru) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

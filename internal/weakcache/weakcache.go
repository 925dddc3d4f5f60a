// Package weakcache shares a read-only value built from a key between
// everyone who asks for the same key, for as long as one of them still
// holds it: the cache keeps weak pointers, and a value's entry is dropped
// when the garbage collector frees it. A thousand runs that declare the
// same tool then hold one compiled schema, not a thousand, and a tool no
// run declares any more costs nothing. Standard library only, so the
// engine may use it.
package weakcache

import (
	"runtime"
	"sync"
	"weak"
)

// Cache maps keys to values that someone holds. The zero value is ready.
type Cache[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]weak.Pointer[V]
}

type entry[K comparable, V any] struct {
	key K
	ptr weak.Pointer[V]
}

// Get returns the value built for key that someone still holds, or calls
// build and keeps a weak pointer to what it returns. An error is returned
// as it is and nothing is kept. Two callers that miss at once may both
// build; the later one's value is kept, and both values are valid.
func (c *Cache[K, V]) Get(key K, build func() (*V, error)) (*V, error) {
	c.mu.Lock()
	v := c.m[key].Value()
	c.mu.Unlock()
	if v != nil {
		return v, nil
	}
	v, err := build()
	if err != nil {
		return nil, err
	}
	p := weak.Make(v)
	c.mu.Lock()
	if c.m == nil {
		c.m = map[K]weak.Pointer[V]{}
	}
	c.m[key] = p
	c.mu.Unlock()
	runtime.AddCleanup(v, c.forget, entry[K, V]{key, p})
	return v, nil
}

// forget drops a freed value's entry, unless the key was built again
// since.
func (c *Cache[K, V]) forget(e entry[K, V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.m[e.key]; ok && cur == e.ptr {
		delete(c.m, e.key)
	}
}

// Len is the number of entries, freed values whose cleanup has not run
// yet included.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

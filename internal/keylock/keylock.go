// Package keylock is a mutex per key: callers with the same key take
// turns, callers with different keys do not wait for each other.
package keylock

import "sync"

// Map holds a mutex for each key in use; a key's entry is dropped when its
// last caller unlocks. The zero Map is ready to use. Safe for concurrent
// use.
type Map struct {
	mu   sync.Mutex
	held map[string]*entry
}

type entry struct {
	mu    sync.Mutex
	users int
}

// Lock waits until no other caller holds key, and holds it until the
// returned func is called (once).
func (m *Map) Lock(key string) (unlock func()) {
	m.mu.Lock()
	if m.held == nil {
		m.held = map[string]*entry{}
	}
	e := m.held[key]
	if e == nil {
		e = &entry{}
		m.held[key] = e
	}
	e.users++
	m.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		m.mu.Lock()
		if e.users--; e.users == 0 {
			delete(m.held, key)
		}
		m.mu.Unlock()
	}
}

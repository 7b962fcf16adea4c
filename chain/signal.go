package chain

import (
	"sync"
	"sync/atomic"
)

// signal is a broadcast "something changed" notification that costs nothing
// when nobody waits: notify only takes the lock when a waiter registered.
//
// Lost wake-ups are impossible if waiters follow the protocol
//
//	ch := s.wait()      // 1. register
//	if condition() {…}  // 2. re-check the condition (atomics)
//	<-ch                // 3. block
//
// and notifiers update the condition's atomics before calling notify: either
// the notifier's load of waiting sees step 1 (and closes ch), or step 2 sees
// the notifier's update (Go's atomics are sequentially consistent).
type signal struct {
	waiting atomic.Bool
	mu      sync.Mutex
	ch      chan struct{}
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	ch := s.ch
	s.waiting.Store(true)
	s.mu.Unlock()
	return ch
}

func (s *signal) notify() {
	if !s.waiting.Load() {
		return
	}
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.waiting.Store(false)
	s.mu.Unlock()
}

package store

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// instanceKey holds the store's instance id, outside every partition's
// prefix ("m/" < "p/"), like the format version.
var instanceKey = []byte("m/instance")

// InstanceID returns the id of this store's instance — of the process that
// owns the state directory — creating it (16 random bytes, hexadecimal) the
// first time and keeping it, synced, in the store. It is what makes a
// process's Kafka transactional id stable across restarts
// (kafka.TransactionalID): a restarted process on the same state directory
// fences its previous incarnation and aborts the transaction it left open,
// and two processes never share one (a state directory is locked by the
// process that has it open). A deleted state directory is a new instance.
func (e *engine) InstanceID() (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return "", fmt.Errorf("store: instance id: %w", ErrClosed)
	}
	v, ok, err := e.be.get(instanceKey)
	if err != nil {
		return "", fmt.Errorf("store: instance id: %w", err)
	}
	if ok {
		return string(v), nil
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("store: instance id: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	b := e.be.newBatch()
	b.set(instanceKey, []byte(id))
	if err := b.commit(); err != nil {
		return "", fmt.Errorf("store: instance id: %w", err)
	}
	return id, nil
}

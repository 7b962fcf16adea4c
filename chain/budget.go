package chain

// The handoff buffers' budget (WithBufferBudget): the chain divides it
// evenly among the partitions it runs, each share clamped to
// [BufferShareFloor, WithBufferSize].

// BufferShareFloor is the smallest share of WithBufferBudget a partition's
// buffer gets, for the given batch size and offset distance: the fetcher's
// read-ahead (four batches) and two more batches, or the offset distance
// and a batch if that is more. Below it the first stage could not read
// ahead of the fetcher and keep a batch for its followers, and a follower
// at the offset distance would always poll.
func BufferShareFloor(batchSize int, offsetDistance int64) int {
	return max(readAheadBatches*batchSize+2*batchSize, int(offsetDistance)+batchSize)
}

// bufferShare is a partition's share of the budget with n partitions
// running.
func (c *config) bufferShare(n int) int {
	if c.bufferBudget <= 0 || n <= 0 {
		return c.bufferSize
	}
	floor := min(c.bufferSize, BufferShareFloor(c.batchSize, c.offsetDistance))
	return min(c.bufferSize, max(floor, c.bufferBudget/n))
}

// shareBuffersLocked gives every running partition its share of the
// budget (c.mu held). Called when a partition starts or stops.
func (c *Chain) shareBuffersLocked() {
	if c.cfg.bufferBudget <= 0 {
		return
	}
	share := c.cfg.bufferShare(len(c.mu.parts))
	for _, p := range c.mu.parts {
		p.setBufferCap(share)
	}
}

// setBufferCap sets the capacity of the partition's buffer, now if it is
// built and for every buffer it builds later (an exactly-once rewind
// builds a new one).
func (p *partitionRun) setBufferCap(n int) {
	p.bufCap.Store(int64(n))
	if v := p.view.Load(); v != nil {
		v.ring.SetCapacity(n)
	}
}

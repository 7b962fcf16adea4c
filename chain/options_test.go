package chain_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

// TestDefaultBatchSizeFollowsASmallBuffer: without WithBatchSize, a buffer
// smaller than DefaultBatchSize is accepted (the batch size is clamped to
// it); an explicit batch size is still checked against the buffer.
func TestDefaultBatchSizeFollowsASmallBuffer(t *testing.T) {
	stages := []chain.Stage{{Name: "only", Processor: chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error { return nil })}}
	_, err := chain.New(stages, testDecoder, chain.WithBufferSize(chain.DefaultBatchSize/8))
	require.NoError(t, err)
	_, err = chain.New(stages, testDecoder, chain.WithBufferSize(2))
	require.NoError(t, err)
	_, err = chain.New(stages, testDecoder, chain.WithBufferSize(32), chain.WithBatchSize(64))
	require.ErrorContains(t, err, "batch size must be in [1, buffer size 32], got 64")
	_, err = chain.New(stages, testDecoder, chain.WithBatchSize(0))
	require.ErrorContains(t, err, "batch size must be in [1, buffer size 8192], got 0")
}

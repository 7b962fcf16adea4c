package chain

// MaxPause is maxPause, for the tests of the first stage's pause.
const MaxPause = maxPause

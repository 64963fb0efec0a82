package processor

// Handle is the processor's view of its partition task. It is passed to Init;
// a processor keeps it to use timers and QueryInfo in later calls. State
// variables are created with NewValueState, NewListState and NewMapState.
//
// The engine implements Handle; a Handle from anywhere else (a test fake)
// cannot declare state variables (ErrForeignHandle). Test processors with
// package kstatetest, which runs them on the real engine.
type Handle interface {
	// RegisterTimer registers a timer for the current grouping key at
	// expiryMs. Registering an existing timer is a no-op. A timer in the
	// past registered in HandleInputRows or HandleInitialState fires in the
	// same batch.
	RegisterTimer(expiryMs int64) error
	// DeleteTimer deletes the current key's timer at expiryMs; a no-op when absent.
	DeleteTimer(expiryMs int64) error
	// ListTimers returns the current key's timers in ascending order.
	ListTimers() ([]int64, error)
	// QueryInfo identifies the application, run, batch and partition.
	QueryInfo() QueryInfo
	// DeleteIfExists drops the state variable name and all its data (Init only).
	DeleteIfExists(stateName string) error
}

// Package processor is kstate's programming model: the StatefulProcessor a
// user implements, the Handle it declares state variables and timers with,
// and the values (TimerValues, ExpiredTimerInfo, QueryInfo) the engine hands
// to it. It mirrors Apache Spark's transformWithState API in Go.
//
// A processor instance belongs to exactly one partition task and is called
// from one goroutine at a time, so it needs no locking. The engine calls,
// per partition:
//
//	Init(handle)                          once, declares state variables
//	HandleInitialState(key, value, tv)     first run only (optional interface)
//	HandleInputRows(key, rows, tv, out)    once per key present in a micro-batch
//	HandleExpiredTimer(key, tv, t, out)    once per expired timer, after all input
//	Close()                                when the task stops
//
// State variables are created in Init with NewValueState, NewListState and
// NewMapState; every operation on them is scoped to the grouping key of the
// call in progress. A processor only needs this package and package state
// (codecs, state variable types, WithTTL).
package processor

// Package internal holds kstate's implementation packages that are not
// public API (the engine that runs tasks and micro-batches).
package internal

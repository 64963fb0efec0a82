package enginetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/kstate/kstate/internal/engine"
)

// blocker makes an instance's processor calls block on chosen keys: the
// stuck processor of the watchdog scenarios ("block i1 k" ... "unblock i1
// k"). A blocked call is durably blocked in the synctest bubble, so the
// scenario's steps settle around it.
type blocker struct {
	mu   sync.Mutex
	keys map[string]chan struct{}
}

// wait blocks while key is blocked; it reports whether it did.
func (b *blocker) wait(key string) bool {
	b.mu.Lock()
	ch := b.keys[key]
	b.mu.Unlock()
	if ch == nil {
		return false
	}
	<-ch
	return true
}

func (b *blocker) block(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.keys == nil {
		b.keys = map[string]chan struct{}{}
	}
	if b.keys[key] == nil {
		b.keys[key] = make(chan struct{})
	}
}

// unblock releases key's calls; "" releases every key.
func (b *blocker) unblock(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, ch := range b.keys {
		if key == "" || k == key {
			close(ch)
			delete(b.keys, k)
		}
	}
}

// stuckCommand runs the watchdog scenarios' commands.
func (e *Env) stuckCommand(cmd string, i *Instance, args []string) (string, error) {
	switch cmd {
	case "block", "unblock":
		if len(args) != 1 {
			return "", fmt.Errorf("%s <inst> <key>", cmd)
		}
		if cmd == "block" {
			i.blocks.block(args[0])
			return "", nil
		}
		i.blocks.unblock(args[0])
		e.settle()
		return e.flush(), nil
	case "exited":
		if !i.exited() {
			return i.name + ": running", nil
		}
		return fmt.Sprintf("%s: exited: %v", i.name, i.err), nil
	case "stuck":
		var se *engine.StuckError
		if !errors.As(i.err, &se) {
			return "not stuck", nil
		}
		return fmt.Sprintf("partition=%d method=%s key=%s for=%v limit=%s", se.Partition, se.Method, se.Key, se.For, se.Limit), nil
	case "in-flight":
		return fmt.Sprintf("batch_in_flight=%v", i.coord.Snapshot().BatchInFlight), nil
	}
	return "", fmt.Errorf("unknown command %q", cmd)
}

// warnTracer is a slog.Handler that traces an instance's records at Warn
// and above with the clock's elapsed time ("start i1 logs=warn"), so a
// scenario checks what an operator would read, and when. A "stack"
// attribute is shown as whether it holds the processor's blocked call.
type warnTracer struct {
	e     *Env
	name  string
	next  slog.Handler
	attrs []slog.Attr
}

func (h *warnTracer) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *warnTracer) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var kv []string
		add := func(a slog.Attr) {
			switch a.Key {
			case "app", "instance":
				return
			case "stack":
				s := a.Value.String()
				a = slog.String("stack", "without the processor")
				switch {
				case strings.Contains(s, "enginetest.(*Counter).HandleInputRows"):
					a = slog.String("stack", "HandleInputRows")
				case strings.Contains(s, "enginetest.(*Counter).Init"):
					a = slog.String("stack", "Init")
				}
			}
			kv = append(kv, a.String())
		}
		for _, a := range h.attrs {
			add(a)
		}
		r.Attrs(func(a slog.Attr) bool { add(a); return true })
		sort.Strings(kv)
		h.e.traceLoop("[%v] %s: %s: %s %s", h.e.Clock.Elapsed(), h.name, r.Level, r.Message, strings.Join(kv, " "))
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *warnTracer) WithAttrs(as []slog.Attr) slog.Handler {
	return &warnTracer{e: h.e, name: h.name, next: h.next.WithAttrs(as), attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h *warnTracer) WithGroup(name string) slog.Handler {
	return &warnTracer{e: h.e, name: h.name, next: h.next.WithGroup(name), attrs: h.attrs}
}

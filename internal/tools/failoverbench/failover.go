package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/internal/kafka"
)

// Events of the failover mode, each done to instance "b" of two:
const (
	evKill    = "kill"    // SIGKILL
	evStop    = "stop"    // SIGTERM, LeaveGroupOnShutdown=false (the default)
	evLeave   = "leave"   // SIGTERM, LeaveGroupOnShutdown=true
	evRestart = "restart" // SIGTERM (no leave) and start again at once, same instance id
	// SIGTERM (no leave) and start again after the session timeout and 3 s
	// more: the partitions move to a, then back to b.
	evLateRestart = "late-restart"
)

var allEvents = []string{evRestart, evStop, evKill, evLeave, evLateRestart}

// failoverOptions are the flags of the failover mode.
type failoverOptions struct {
	Brokers    []string
	Sessions   []time.Duration
	Events     []string
	Repeats    int
	Partitions int
	Keys       int
	Rate       int // input records/s
	// TxnTimeout is the instances' Options.Kafka.TransactionTimeout: 0
	// kstate's default, negative the session timeout of each run.
	TxnTimeout time.Duration
	Dir        string
	Log        io.Writer // progress
}

func (o failoverOptions) validate() error {
	switch {
	case len(o.Sessions) == 0 || len(o.Events) == 0:
		return errors.New("failover: -sessions and -events must not be empty")
	case o.Repeats < 1 || o.Partitions < 2 || o.Keys < o.Partitions || o.Rate < 10*o.Partitions:
		return fmt.Errorf("failover: want -repeats >= 1, -partitions >= 2, -keys >= partitions, -rate >= 10 per partition (got %d, %d, %d, %d)",
			o.Repeats, o.Partitions, o.Keys, o.Rate)
	}
	for _, e := range o.Events {
		if !slices.Contains(allEvents, e) {
			return fmt.Errorf("failover: unknown event %q (want %s)", e, strings.Join(allEvents, ", "))
		}
	}
	return nil
}

// selfCommand starts this program in another mode; the test replaces it
// (the test binary re-executes itself).
var selfCommand = func(args ...string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, args...)
}

// instance is a running child process of the instance mode.
type instance struct {
	args instanceArgs
	cmd  *exec.Cmd
	done chan struct{}
	err  error // of Wait, once done is closed
}

func startInstance(a instanceArgs, logDir string) (*instance, error) {
	cmd := selfCommand(a.argv()...)
	f, err := os.OpenFile(filepath.Join(logDir, a.Instance+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== %s start %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(a.argv(), " "))
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	in := &instance{args: a, cmd: cmd, done: make(chan struct{})}
	go func() {
		in.err = cmd.Wait()
		f.Close()
		close(in.done)
	}()
	return in, nil
}

func (in *instance) running() bool {
	select {
	case <-in.done:
		return false
	default:
		return true
	}
}

// stop signals the instance and waits for it to exit, SIGKILLing it after
// a minute.
func (in *instance) stop(sig syscall.Signal) error {
	_ = in.cmd.Process.Signal(sig)
	select {
	case <-in.done:
	case <-time.After(time.Minute):
		_ = in.cmd.Process.Kill()
		<-in.done
		return fmt.Errorf("instance %s did not stop within a minute of %v", in.args.Instance, sig)
	}
	if sig == syscall.SIGTERM && in.err != nil {
		return fmt.Errorf("instance %s: graceful stop: %v", in.args.Instance, in.err)
	}
	return nil
}

// outputs records the arrival time of each committed output per partition
// (read_committed, as a downstream consumer sees it) and checks the counts.
type outputs struct {
	mu       sync.Mutex
	arrivals [][]time.Time
	seq      seqChecker
	n        int64
}

func (o *outputs) snapshot(p int) []time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.arrivals[p])
}

// live says whether every partition had an output within d before now.
func (o *outputs) live(now time.Time, d time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, a := range o.arrivals {
		if len(a) == 0 || now.Sub(a[len(a)-1]) > d {
			return false
		}
	}
	return true
}

func (o *outputs) count() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

func (o *outputs) consume(ctx context.Context, cl *kgo.Client) {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		now := time.Now()
		o.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			o.arrivals[r.Partition] = append(o.arrivals[r.Partition], now)
			o.seq.add(string(r.Key), string(r.Value))
			o.n++
		})
		o.mu.Unlock()
	}
}

// input produces Rate records/s, round robin over the keys.
type input struct {
	mu   sync.Mutex
	sent map[string]int64
	n    int64
	err  error
}

func (in *input) produce(ctx context.Context, cl *kgo.Client, keys, rate int) {
	const tick = 20 * time.Millisecond
	perTick := max(1, rate*int(tick)/int(time.Second))
	t := time.NewTicker(tick)
	defer t.Stop()
	k := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		recs := make([]*kgo.Record, perTick)
		for i := range recs {
			recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%04d", k), Value: []byte("x")}
			k = (k + 1) % keys
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			if ctx.Err() == nil {
				in.mu.Lock()
				in.err = err
				in.mu.Unlock()
			}
			return
		}
		in.mu.Lock()
		for _, r := range recs {
			in.sent[string(r.Key)]++
		}
		in.n += int64(len(recs))
		in.mu.Unlock()
	}
}

// failoverRun is one session timeout's pair of instances.
type failoverRun struct {
	o       failoverOptions
	session time.Duration
	app     string
	adm     *kadm.Client
	out     *outputs
	a, b    *instance
	bArgs   instanceArgs
	logf    func(string, ...any)
}

// runFailover measures every event for every session timeout.
func runFailover(ctx context.Context, o failoverOptions) ([]eventResult, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(o.Log, "%s failover: "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	var results []eventResult
	for _, s := range o.Sessions {
		rs, err := failoverSession(ctx, o, s, logf)
		results = append(results, rs...)
		if err != nil {
			return results, fmt.Errorf("session timeout %v: %w", s, err)
		}
	}
	return results, nil
}

func failoverSession(ctx context.Context, o failoverOptions, session time.Duration, logf func(string, ...any)) (results []eventResult, err error) {
	app := fmt.Sprintf("failover-%s-%x", strings.ReplaceAll(session.String(), ".", "_"), time.Now().UnixNano()&0xffffff)
	in, outTopic := app+"-in", app+"-out"
	ka, err := kafka.NewAdmin(o.Brokers)
	if err != nil {
		return nil, err
	}
	defer ka.Close()
	for _, t := range []string{in, outTopic} {
		if err := ka.EnsureTopic(ctx, kafka.TopicSpec{Name: t, Partitions: o.Partitions, ReplicationFactor: -1}); err != nil {
			return nil, err
		}
	}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(o.Brokers...))
	if err != nil {
		return nil, err
	}
	defer admCl.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()

	prod, err := kgo.NewClient(kgo.SeedBrokers(o.Brokers...), kgo.DefaultProduceTopic(in), kgo.ProducerLinger(0))
	if err != nil {
		return nil, err
	}
	defer prod.Close()
	src := &input{sent: make(map[string]int64)}
	wg.Go(func() { src.produce(ctx, prod, o.Keys, o.Rate) })

	cons, err := kgo.NewClient(kgo.SeedBrokers(o.Brokers...), kgo.ConsumeTopics(outTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	out := &outputs{arrivals: make([][]time.Time, o.Partitions)}
	wg.Go(func() { out.consume(ctx, cons) })

	dir := filepath.Join(o.Dir, app)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	txn := o.TxnTimeout
	if txn < 0 {
		txn = session
	}
	args := func(id string, leave bool) instanceArgs {
		return instanceArgs{Brokers: strings.Join(o.Brokers, ","), App: app, Instance: id, State: filepath.Join(dir, id),
			In: in, Out: outTopic, Session: session, Leave: leave, TxnTimeout: txn}
	}
	r := &failoverRun{o: o, session: session, app: app, adm: kadm.NewClient(admCl), out: out, logf: logf}
	defer func() {
		for _, x := range []*instance{r.a, r.b} {
			if x != nil && x.running() {
				_ = x.stop(syscall.SIGKILL)
			}
		}
	}()
	if r.a, err = startInstance(args("a", false), dir); err != nil {
		return nil, err
	}
	r.bArgs = args("b", false)
	logf("session timeout %v: app %s, %d partitions, %d records/s; instance logs in %s", session, app, o.Partitions, o.Rate, dir)

	for rep := range o.Repeats {
		for _, ev := range o.Events {
			res, err := r.event(ctx, ev)
			if err != nil {
				return results, fmt.Errorf("%s (repeat %d): %w", ev, rep+1, err)
			}
			logf("session %v %-7s b's partitions %v: longest gap %v, event → last one's first output %v, paused in all %v; a's partitions: longest gap %v",
				session, ev, res.Stopped, res.StoppedGap().Round(10*time.Millisecond), res.StoppedResume().Round(10*time.Millisecond),
				res.StoppedPaused().Round(10*time.Millisecond), res.OtherGap().Round(10*time.Millisecond))
			results = append(results, res)
		}
	}

	// Exactly once through all of it: stop the input, let the outputs
	// catch up, compare every key's last count with its inputs.
	cancel()
	wg.Wait()
	if src.err != nil {
		return results, fmt.Errorf("produce: %w", src.err)
	}
	if err := r.ensureB(context.Background(), false); err != nil {
		return results, err
	}
	deadline := time.Now().Add(2*session + time.Minute)
	cons2, err := kgo.NewClient(kgo.SeedBrokers(o.Brokers...), kgo.ConsumeTopics(outTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return results, err
	}
	defer cons2.Close()
	final := &outputs{arrivals: make([][]time.Time, o.Partitions)}
	cctx, ccancel := context.WithDeadline(context.Background(), deadline)
	defer ccancel()
	go final.consume(cctx, cons2)
	for final.count() < src.n && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	ccancel()
	time.Sleep(100 * time.Millisecond)
	final.mu.Lock()
	err = final.seq.check(src.sent)
	final.mu.Unlock()
	if err != nil {
		return results, fmt.Errorf("%d inputs, %d outputs: %w", src.n, final.count(), err)
	}
	logf("session timeout %v: exactly once: %d inputs, %d outputs, every key's counts 1..n once", session, src.n, final.count())
	for _, x := range []*instance{r.b, r.a} {
		if err := x.stop(syscall.SIGTERM); err != nil {
			return results, err
		}
	}
	return results, nil
}

// ensureB starts instance b with LeaveGroupOnShutdown=leave unless it runs
// so already (a b running with the other setting is stopped first).
func (r *failoverRun) ensureB(ctx context.Context, leave bool) error {
	if r.b != nil && r.b.running() {
		if r.b.args.Leave == leave {
			return nil
		}
		if err := r.b.stop(syscall.SIGTERM); err != nil {
			return err
		}
	}
	a := r.bArgs
	a.Leave = leave
	var err error
	r.b, err = startInstance(a, filepath.Dir(a.State))
	return err
}

// settle waits until the group is stable with both instances holding
// partitions and every partition's output flowing, for 3 s in a row, and
// returns instance b's partitions.
func (r *failoverRun) settle(ctx context.Context) ([]int32, error) {
	deadline := time.Now().Add(3*r.session + 2*time.Minute)
	var since time.Time
	var last []int32
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !r.a.running() || !r.b.running() {
			return nil, fmt.Errorf("an instance exited: a: %v, b: %v (logs in %s)", r.a.err, r.b.err, filepath.Dir(r.bArgs.State))
		}
		bParts, ok := r.stable(ctx)
		ok = ok && r.out.live(time.Now(), time.Second)
		switch {
		case !ok || !slices.Equal(bParts, last):
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= 3*time.Second:
			return bParts, nil
		}
		last = bParts
		time.Sleep(250 * time.Millisecond)
	}
	return nil, errors.New("the group did not settle with both instances and every partition's output flowing")
}

// stable says whether the group is Stable with two members that both hold
// partitions, and returns instance b's.
func (r *failoverRun) stable(ctx context.Context) (bParts []int32, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gs, err := r.adm.DescribeGroups(ctx, r.app)
	if err != nil {
		return nil, false
	}
	g, ok := gs[r.app]
	if !ok || g.Err != nil || g.State != "Stable" || len(g.Members) != 2 {
		return nil, false
	}
	for _, m := range g.Members {
		c, ok := m.Assigned.AsConsumer()
		if !ok || len(c.Topics) == 0 {
			return nil, false
		}
		if m.InstanceID != nil && *m.InstanceID == r.bArgs.Instance {
			for _, t := range c.Topics {
				bParts = append(bParts, t.Partitions...)
			}
		}
	}
	slices.Sort(bParts)
	return bParts, len(bParts) > 0
}

// event settles the group, does ev to instance b and measures every
// partition's pause until all have resumed and flowed for 3 s.
func (r *failoverRun) event(ctx context.Context, ev string) (eventResult, error) {
	leave := ev == evLeave // restart, stop and late-restart: false
	if ev == evKill && r.b != nil && r.b.running() {
		leave = r.b.args.Leave // either: a kill does not leave
	}
	if err := r.ensureB(ctx, leave); err != nil {
		return eventResult{}, err
	}
	bParts, err := r.settle(ctx)
	if err != nil {
		return eventResult{}, err
	}
	t0 := time.Now()
	switch ev {
	case evKill:
		err = r.b.stop(syscall.SIGKILL)
	case evStop, evLeave:
		err = r.b.stop(syscall.SIGTERM)
	case evRestart, evLateRestart:
		if err = r.b.stop(syscall.SIGTERM); err == nil {
			if ev == evLateRestart {
				time.Sleep(time.Until(t0.Add(r.session + 3*time.Second)))
			}
			r.b, err = startInstance(r.b.args, filepath.Dir(r.b.args.State))
		}
	}
	if err != nil {
		return eventResult{}, err
	}
	// Resumed: 3 s past the event (and, for a late restart, past the
	// group's being stable again with both instances), every partition's
	// output flowing for 3 s in a row.
	deadline := t0.Add(r.session + 2*time.Minute)
	if ev == evLateRestart {
		if _, err := r.settle(ctx); err != nil {
			return eventResult{}, err
		}
	}
	var since time.Time
	for {
		now := time.Now()
		if now.After(deadline) {
			return eventResult{}, fmt.Errorf("not every partition resumed within %v of the event", deadline.Sub(t0))
		}
		switch {
		case now.Sub(t0) < 3*time.Second || !r.out.live(now, time.Second):
			since = time.Time{}
		case since.IsZero():
			since = now
		case now.Sub(since) >= 3*time.Second:
			pauses := make([]pause, r.o.Partitions)
			for p := range pauses {
				ps, ok := pauseOf(r.out.snapshot(p), t0, now)
				if !ok {
					return eventResult{}, fmt.Errorf("partition %d: no output after the event", p)
				}
				pauses[p] = ps
			}
			return eventResult{Session: r.session, Event: ev, Pauses: pauses, Stopped: bParts}, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

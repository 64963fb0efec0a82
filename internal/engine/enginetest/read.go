package enginetest

import "github.com/kstate/kstate/internal/engine"

// ReadCommittedFrom returns the records of committed transactions (and
// non-transactional ones) of topic/p from offset from, and the offset to
// read from next: the first offset of a transaction still open or whose
// markers are hidden, else the log end. For a test driver that hands out
// a topic's committed records once each.
func (b *Broker) ReadCommittedFrom(topic string, p int32, from int64) ([]engine.Message, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, err := b.log(topic, p)
	if err != nil {
		return nil, from
	}
	var out []engine.Message
	end := l.lso()
	for o := max64(from, l.start); o < end; o++ {
		e := l.entries[o-l.start]
		if !e.marker && (e.txn == nil || e.txn.state == txnCommitted) {
			out = append(out, e.msg)
		}
	}
	return out, max64(from, end)
}

// SkipToEnd moves the group's committed offset of every partition of
// topic with records past it to the partition's log end: what is there is never processed (a
// test driver drops the input of a failed batch, as `kstate skip` would).
func (b *Broker) SkipToEnd(topic string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for p, l := range b.topics[topic] {
		if c, ok := b.committed[topic][int32(p)]; ok && c >= l.end() || !ok && l.end() == 0 {
			continue
		}
		if b.committed[topic] == nil {
			b.committed[topic] = map[int32]int64{}
		}
		b.committed[topic][int32(p)] = l.end()
	}
}

// Kill makes the disk refuse writes from now on (its process died), as
// Env's crash does.
func (d *Disk) Kill() { d.kill() }

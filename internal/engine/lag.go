package engine

// The consumer lag of a partition is the number of input records after the
// group's position: end offset - position, summed over the inputs. The
// position is the committed offset (read by the restore, then moved by each
// commit), so while a batch runs the lag still counts the batch's records,
// as the group's committed offsets do. The end offset is the larger of two
// readings, both only growing:
//
//   - the high watermark of the last fetch that returned the partition
//     (noteLag, on the loop after each batch): fresh between batches, but
//     stale while a batch runs, and absent for a partition whose fetches
//     return nothing;
//   - the end offsets read by the admin client independently of the batch
//     loop (NoteEndOffsets: the App reads every input's last stable
//     offsets every few seconds, on a goroutine of its own; and the
//     restore reads them once).
//
// So the lag keeps up with new input while a long batch runs (issue #25:
// it read 0 for 90 s with a 498k backlog when it came from the fetches
// only).

// NoteEndOffsets records the end offsets of the partitions of input topic
// (the last stable offset, for a read_committed consumer) and recomputes
// the lag of the partitions assigned to this coordinator. Safe to call at
// any time from any goroutine; partitions not assigned here and unknown
// topics are ignored.
func (c *Coordinator) NoteEndOffsets(topic string, ends map[int32]int64) {
	i, ok := c.inputIndex(topic)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, s := range c.mu.slots {
		if end, ok := ends[p]; ok && i < len(s.endOffset) {
			s.endOffset[i] = end
			s.lag = s.computeLag()
		}
	}
}

// computeLag is the slot's lag from its positions and end offsets (under
// Coordinator.mu): -1 when not ready or unknown for some input.
func (s *slot) computeLag() int64 {
	if !s.ready {
		return -1
	}
	var lag int64
	for i := range s.position {
		end := max(at(s.fetchEnd, i), at(s.endOffset, i))
		pos := s.position[i]
		if pos < 0 {
			// Nothing committed yet: consumption starts at the log start
			// (the sessions reset to the earliest offset).
			pos = at(s.logStart, i)
		}
		if end < 0 || pos < 0 {
			return -1
		}
		lag += max(0, end-pos)
	}
	return lag
}

// at is xs[i], or -1 (unknown) when xs has no element i.
func at(xs []int64, i int) int64 {
	if i < len(xs) {
		return xs[i]
	}
	return -1
}

package engine

import kgroup "github.com/kstate/kstate/internal/group"

// GroupView returns the group as the session's last assignment described
// it (GroupViewer) and the member's last rebalances; ok is false when the
// coordinator has no session (before Run joined, after it closed), its
// session is not a GroupViewer, or the session has no view yet. Safe from
// any goroutine.
func (c *Coordinator) GroupView() (v kgroup.View, rebalances []kgroup.Rebalance, ok bool) {
	c.mu.Lock()
	s := c.mu.session
	c.mu.Unlock()
	gv, isViewer := s.(GroupViewer)
	if s == nil || !isViewer {
		return kgroup.View{}, nil, false
	}
	v, rebalances = gv.GroupView()
	return v, rebalances, len(v.Members) > 0
}

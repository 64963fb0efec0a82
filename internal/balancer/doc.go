// Package balancer is kstate's group balancer: a franz-go GroupBalancer on
// the classic group protocol, cooperative, that assigns each partition
// number (one task: partition p of every input topic, and shard p) by
// stickiness, balance and the state each member already holds (the
// changelog position of its local copies, group.Meta), with standby copies
// on other processes and KIP-441 warm-ups before a partition moves to a
// member that would otherwise restore it first. Decide is the pure,
// deterministic decision; Balancer adapts it to franz-go.
// docs/ARCHITECTURE.md, "Group balancing", says what is decided and why.
package balancer

package kafka

import "github.com/twmb/franz-go/pkg/kadm"

// Kadm exposes the admin's kadm client for operations this package does not
// wrap (group descriptions, topic deletion) in the reset and rescale tools.
func (a *Admin) Kadm() *kadm.Client { return a.adm }

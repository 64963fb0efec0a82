package kstatetest

import "errors"

// ErrNoTopic is returned when Config.InitialState reads a topic the driver
// was not given with InitialTopic.
var ErrNoTopic = errors.New("kstatetest: initial state topic not given")

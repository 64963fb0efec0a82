// Package examples holds runnable kstate applications, one folder each, that
// show the programming model on the embedded Kafka or on a real cluster.
package examples

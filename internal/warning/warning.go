// Package warning is the one shape of a non-fatal finding of the gateway's sources: an object
// (a VMI, a Secret, a discovery file, a tenant cluster, an endpoint) that was skipped or read
// with a default, and why. Replica discovery, the TLS certificates and the cluster registry
// report their warnings with it, and /debug and the logs show them all alike.
package warning

// Warning says what is wrong with one object or entry.
type Warning struct {
	// Object names it the way the reader finds it: Kind/namespace/name, file:<path>,
	// "tenant cluster <tenant>", ...
	Object string
	Reason string
}

func (w Warning) String() string { return w.Object + ": " + w.Reason }

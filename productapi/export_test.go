package productapi

import "time"

// SetLogWriteTimeout shortens the log stream's write deadline for a test; the returned func
// puts it back.
func SetLogWriteTimeout(d time.Duration) func() {
	old := logWriteTimeout
	logWriteTimeout = d
	return func() { logWriteTimeout = old }
}

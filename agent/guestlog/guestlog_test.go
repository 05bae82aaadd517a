package guestlog

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 3, 7, 0, 0, 123456789, time.UTC)
	for _, r := range []Record{
		{Seq: 1, Time: at, Kind: KindLine, Stream: Stderr, Line: "INFO 12-03 07:00:00 [api_server.py:1] vLLM API server version 0.11.0\r\x1b[0m\ttab"},
		{Seq: 2, Time: at, Kind: KindStatus, Status: &Status{Stage: StageCrashLooping, Since: at, Restarts: 5,
			LastExit: &Exit{Code: 1, After: 42 * time.Second, At: at, LastLines: []string{"torch.OutOfMemoryError: CUDA out of memory."}}}},
	} {
		b, err := Encode(r)
		require.NoError(t, err)
		require.Equal(t, 1, bytes.Count(b, []byte("\n")), "one record, one line: %q", b)
		// The serial console adds carriage returns; the guest-console-log container may prefix
		// nothing, but a reader must not depend on it.
		got, err := Decode(append(bytes.TrimSuffix(b, []byte("\n")), '\r', '\n'))
		require.NoError(t, err)
		r.V = Version
		require.Equal(t, r, got)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		notRecord  bool
	}{
		{"kernel line", "[    0.000000] Linux version 6.1.0-28-amd64", true},
		{"cloud-init line", "Cloud-init v. 22.4.2 finished at Thu, 03 Dec 2026", true},
		{"bad json", Prefix + "{", false},
		{"other version", Prefix + `{"v":2,"seq":1,"k":"line"}`, false},
		{"unknown kind", Prefix + `{"v":1,"seq":1,"k":"what"}`, false},
		{"status without status", Prefix + `{"v":1,"seq":1,"k":"status"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.line))
			require.Error(t, err)
			require.Equal(t, tc.notRecord, errors.Is(err, ErrNotRecord), "%v", err)
		})
	}
}

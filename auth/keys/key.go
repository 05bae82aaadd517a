// Package keys is inferplane's API keys: their format, their HMAC-SHA256 hashing under a server
// secret, the records a store keeps (never the key itself), the in-memory index the auth
// service reads, and the decision whether a key may call an endpoint.
//
// A key is "ipk_" followed by 40 random bytes in unpadded URL-safe base64 (58 characters in
// all). Its first 8 bytes, in hex, are the key's public id: the id finds the record without
// a scan, and the HMAC of the whole key, compared in constant time, proves the rest.
package keys

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
	"sync"
)

const (
	// Prefix starts every key, so that secret scanners and people recognise one.
	Prefix = "ipk_"
	// idBytes of the key's random bytes form its public id; secretBytes more follow.
	idBytes     = 8
	secretBytes = 32
	rawBytes    = idBytes + secretBytes
	// KeyLen is the length of a key string.
	KeyLen = len(Prefix) + (rawBytes*8+5)/6
	// MinSecretLen is the shortest server secret accepted: as long as a SHA-256 block's key
	// would need to carry 256 bits of entropy if random.
	MinSecretLen = 32
	// SecretEnv is the environment variable that may hold the server secret.
	SecretEnv = "INFERPLANE_KEYS_SECRET"
)

var b64 = base64.RawURLEncoding

// ErrMalformed is a string that is not an inferplane key.
var ErrMalformed = errors.New("not an inferplane API key")

// Generate makes a new key and its id from r (crypto/rand when nil).
func Generate(r io.Reader) (key, id string, err error) {
	if r == nil {
		r = rand.Reader
	}
	var raw [rawBytes]byte
	if _, err := io.ReadFull(r, raw[:]); err != nil {
		return "", "", fmt.Errorf("read random bytes for a key: %w", err)
	}
	return Prefix + b64.EncodeToString(raw[:]), hex.EncodeToString(raw[:idBytes]), nil
}

// ParseID returns the public id of a key, or ErrMalformed. It does not prove the key genuine.
func ParseID(key string) (string, error) {
	raw, err := decodeKey(key)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(raw[:idBytes]), nil
}

// parseIDNum is ParseID's id as the number the index is keyed by.
func parseIDNum(key string) (uint64, error) {
	raw, err := decodeKey(key)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(raw[:idBytes]), nil
}

func decodeKey(key string) (raw [rawBytes]byte, err error) {
	if len(key) != KeyLen || !strings.HasPrefix(key, Prefix) {
		return raw, ErrMalformed
	}
	var buf [KeyLen]byte
	n, err := b64.Decode(raw[:], append(buf[:0], key[len(Prefix):]...))
	if err != nil || n != rawBytes {
		return raw, ErrMalformed
	}
	return raw, nil
}

// ValidID reports whether s has the shape of a key id (16 lowercase hex digits).
func ValidID(s string) bool {
	if len(s) != 2*idBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Hasher computes the HMAC-SHA256 of keys under the server secret. It is safe for
// concurrent use.
type Hasher struct {
	pool sync.Pool
}

// NewHasher returns a Hasher for secret, which must be at least MinSecretLen bytes.
func NewHasher(secret []byte) (*Hasher, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("the key secret is %d bytes; at least %d are needed (make one with `inferplane keys secret`)",
			len(secret), MinSecretLen)
	}
	s := append([]byte(nil), secret...)
	h := &Hasher{}
	h.pool.New = func() any { return hmac.New(sha256.New, s) }
	return h, nil
}

// Sum is the HMAC of key.
func (h *Hasher) Sum(key string) [sha256.Size]byte {
	m := h.pool.Get().(hash.Hash)
	m.Reset()
	_, _ = io.WriteString(m, key)
	var out [sha256.Size]byte
	m.Sum(out[:0])
	h.pool.Put(m)
	return out
}

// Hex is the HMAC of key as the lowercase hex the stores keep.
func (h *Hasher) Hex(key string) string {
	s := h.Sum(key)
	return hex.EncodeToString(s[:])
}

// LoadSecret reads the server secret from file when it is set, else from the SecretEnv
// environment variable. Surrounding white space (a trailing newline) is dropped. The secret
// is never taken from a flag value, which would land in shell history and process lists.
func LoadSecret(file string) ([]byte, error) {
	var s []byte
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read the key secret: %w", err)
		}
		s = b
	case os.Getenv(SecretEnv) != "":
		s = []byte(os.Getenv(SecretEnv))
	default:
		return nil, fmt.Errorf("no key secret: pass --secret-file FILE or set %s (make one with `inferplane keys secret`)", SecretEnv)
	}
	s = []byte(strings.TrimSpace(string(s)))
	if len(s) < MinSecretLen {
		src := SecretEnv
		if file != "" {
			src = file
		}
		return nil, fmt.Errorf("%s: the key secret is %d bytes; at least %d are needed", src, len(s), MinSecretLen)
	}
	return s, nil
}

// NewSecret returns a fresh random secret as URL-safe base64 text (48 random bytes).
func NewSecret() (string, error) {
	var raw [48]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	return b64.EncodeToString(raw[:]), nil
}

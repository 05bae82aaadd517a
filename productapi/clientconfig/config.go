// Package clientconfig is the CLI's side of signing in to the product API: contexts like
// kubectl's (a server, the identity provider it trusts, a default tenant), the current one, and
// each context's tokens, kept under $XDG_CONFIG_HOME/inferplane with mode 0600 in folders of
// mode 0700 and written atomically, so a crash never leaves half a file and no other user of the
// machine reads a token.
//
//	$XDG_CONFIG_HOME/inferplane/config.yaml          contexts and the current one
//	$XDG_CONFIG_HOME/inferplane/tokens/<context>.json ID token, refresh token, expiry
package clientconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// EnvDir overrides the folder ($XDG_CONFIG_HOME/inferplane when unset).
const EnvDir = "INFERPLANE_CONFIG_DIR"

// Context is one product API server the CLI signs in to.
type Context struct {
	Name string `json:"name"`
	// Server is the API's base URL (without /api/v1).
	Server string `json:"server"`
	// Issuer and ClientID are the identity provider and the client the CLI signs in with, as
	// the server announced them at login.
	Issuer   string `json:"issuer"`
	ClientID string `json:"clientID"`
	// Tenant is the tenant commands act on when they are given none.
	Tenant string `json:"tenant,omitempty"`
	// User is who signed in (the token's email or subject), for get-contexts.
	User string `json:"user,omitempty"`
}

// Config is the contexts and the current one.
type Config struct {
	CurrentContext string    `json:"currentContext,omitempty"`
	Contexts       []Context `json:"contexts,omitempty"`
}

// Dir is the folder of the CLI's configuration: $INFERPLANE_CONFIG_DIR, else
// $XDG_CONFIG_HOME/inferplane, else ~/.config/inferplane.
func Dir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	base, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("where to keep the CLI's sign-in: %w (set XDG_CONFIG_HOME or %s)", err, EnvDir)
	}
	return filepath.Join(base, "inferplane"), nil
}

// Store reads and writes the configuration and tokens in one folder.
type Store struct{ Dir string }

// Open is the store in Dir().
func Open() (*Store, error) {
	d, err := Dir()
	if err != nil {
		return nil, err
	}
	return &Store{Dir: d}, nil
}

func (s *Store) configFile() string { return filepath.Join(s.Dir, "config.yaml") }

// Load reads the configuration; a missing file is an empty configuration.
func (s *Store) Load() (*Config, error) {
	data, err := os.ReadFile(s.configFile())
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, err
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", s.configFile(), err)
	}
	return &c, nil
}

// Save writes the configuration (mode 0600, atomically).
func (s *Store) Save(c *Config) error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	return writePrivate(s.configFile(), data)
}

// Get is the context of that name.
func (c *Config) Get(name string) (Context, bool) {
	for _, x := range c.Contexts {
		if x.Name == name {
			return x, true
		}
	}
	return Context{}, false
}

// Current is the current context; ok is false when there is none.
func (c *Config) Current() (Context, bool) {
	if c.CurrentContext == "" {
		return Context{}, false
	}
	return c.Get(c.CurrentContext)
}

// Set adds the context or replaces the one of the same name.
func (c *Config) Set(x Context) {
	for i := range c.Contexts {
		if c.Contexts[i].Name == x.Name {
			c.Contexts[i] = x
			return
		}
	}
	c.Contexts = append(c.Contexts, x)
	slices.SortFunc(c.Contexts, func(a, b Context) int { return strings.Compare(a.Name, b.Name) })
}

// Delete removes a context (and makes none current if it was).
func (c *Config) Delete(name string) bool {
	n := len(c.Contexts)
	c.Contexts = slices.DeleteFunc(c.Contexts, func(x Context) bool { return x.Name == name })
	if c.CurrentContext == name {
		c.CurrentContext = ""
	}
	return len(c.Contexts) != n
}

// Names lists the contexts' names.
func (c *Config) Names() []string {
	out := make([]string, len(c.Contexts))
	for i, x := range c.Contexts {
		out[i] = x.Name
	}
	return out
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// NameFor is the default name of a server's context: its host and port (api.example.com,
// 127.0.0.1:8080 becomes 127.0.0.1-8080 in file names, not in the context's name).
func NameFor(server string) string {
	s := strings.TrimPrefix(strings.TrimPrefix(server, "https://"), "http://")
	s, _, _ = strings.Cut(s, "/")
	return s
}

// fileName is a context's name as a file name.
func fileName(name string) string {
	f := unsafeChars.ReplaceAllString(name, "-")
	if f == "" || f == "." || f == ".." {
		f = "context"
	}
	return f
}

// writePrivate writes data to file with mode 0600 through a temporary file and a rename, in a
// folder of mode 0700.
func writePrivate(file string, data []byte) error {
	dir := filepath.Dir(file)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

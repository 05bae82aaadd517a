package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/endpoint"
	"github.com/inferplane/inferplane/internal/fileutil"
)

// The flags several commands share, each with one meaning and one usage text (docs/cli.md;
// TestCLIConventions holds every command to them).

const (
	usageTenants = "the tenants folder: node types, masters, tenants and their jobs (the generator's inputs)"
	usageRecipes = "the vLLM recipes folder (models/, strategies/, taxonomy.yaml)"
	usageFile    = "write to this file instead of standard output"
)

// Environment variables the commands read, besides the endpoint's ($INFERPLANE_DOMAIN, ...).
const (
	envKeysFile       = "INFERPLANE_KEYS_FILE"
	envKeysSecretFile = "INFERPLANE_KEYS_SECRET_FILE"
	envServerURL      = "INFERPLANE_SERVER"
	// defaultServerURL is the admin address of `inferplane xds serve` (--admin-address
	// 127.0.0.1:9090), where it serves /metrics, /v1/health and /v1/usage.
	defaultServerURL = "http://127.0.0.1:9090"
)

// addServerFlag is --server: the gateway, the base URL of an xDS server's admin address.
func addServerFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "server", serverURLDefault(), serverUsage)
}

var serverUsage = "the gateway: base URL of the xDS server's admin address ($" + envServerURL + " when set)"

func serverURLDefault() string {
	if s := os.Getenv(envServerURL); s != "" {
		return s
	}
	return defaultServerURL
}

// addDomainFlag is --domain: endpoints are https://<job>.<tenant>.<domain>. Where required,
// it has no default; elsewhere $INFERPLANE_DOMAIN.
func addDomainFlag(fs *pflag.FlagSet, p *string, required bool) {
	if required {
		fs.StringVar(p, "domain", "", "endpoints are https://<job>.<tenant>.<domain> (required)")
		return
	}
	fs.StringVar(p, "domain", os.Getenv(endpoint.EnvDomain), "endpoints are https://<job>.<tenant>.<domain> ($"+endpoint.EnvDomain+")")
}

// addFileFlag is --file: where a command that prints a document writes it instead.
func addFileFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "file", "", usageFile)
	_ = cmd.MarkFlagFilename("file")
}

// writeOut writes data to the --file given (atomically, mode perm) or, without one, to
// standard output; it says on stderr what it wrote.
func writeOut(cmd *cobra.Command, file string, data []byte, perm os.FileMode) error {
	if file == "" || file == "-" {
		_, err := cmd.OutOrStdout().Write(data)
		return err
	}
	if err := fileutil.WriteAtomic(file, data, perm); err != nil {
		return fmt.Errorf("--file %s: %w", file, err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", file)
	return nil
}

// defaultKeysFile is the key store file when --store-file is not given.
func defaultKeysFile() string {
	if p := os.Getenv(envKeysFile); p != "" {
		return p
	}
	return filepath.Join(userDir("XDG_DATA_HOME", ".local", "share"), "inferplane", "keys.db")
}

// defaultSecretFile is where `keys secret --file` puts the key secret by default, and where
// the keys commands and xds serve find it when told nothing else.
func defaultSecretFile() string {
	return filepath.Join(userDir("XDG_CONFIG_HOME", ".config"), "inferplane", "keys-secret")
}

// userDir is $env, else ~/<rel...>, else the current folder.
func userDir(env string, rel ...string) string {
	if dir := os.Getenv(env); dir != "" {
		return dir
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "."
	}
	return filepath.Join(append([]string{home}, rel...)...)
}

// secretFileUsage is --secret-file's usage: where the secret comes from without the flag.
var secretFileUsage = "file holding the API key secret (default: $" + envKeysSecretFile + ", else the secret in $" + keys.SecretEnv + ", else " +
	"~/.config/inferplane/keys-secret when it exists)"

// secretFile is the file the key secret is read from: the flag, else $INFERPLANE_KEYS_SECRET_FILE,
// else (unless $INFERPLANE_KEYS_SECRET holds the secret itself) the default file when it exists.
// "" means $INFERPLANE_KEYS_SECRET, or no secret at all.
func secretFile(flag string) string {
	switch {
	case flag != "":
		return flag
	case os.Getenv(envKeysSecretFile) != "":
		return os.Getenv(envKeysSecretFile)
	case os.Getenv(keys.SecretEnv) != "":
		return ""
	}
	if _, err := os.Stat(defaultSecretFile()); err == nil {
		return defaultSecretFile()
	}
	return ""
}

// errNoSecret says how to make the key secret on first use.
var errNoSecret = errors.New("no API key secret: make one with `inferplane keys secret --file " + defaultSecretFile() +
	"` (there, the keys commands and xds serve find it), or pass --secret-file FILE or set $" + envKeysSecretFile +
	"; the gateway (xds serve) must read the same secret")

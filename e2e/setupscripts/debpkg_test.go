package setupscripts

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// debScript is a set-up script that installs Debian packages through hack/debpkg.sh: it prints
// the path of bin, installing pkgs when bin is missing.
type debScript struct {
	name string
	args []string
	bin  string
	pkgs []string
}

var debScripts = []debScript{
	{name: "hack/redis.sh", bin: "redis-server", pkgs: []string{"redis-server"}},
	{name: "hack/chromium.sh", bin: "chromium", pkgs: []string{"chromium", "fonts-dejavu-core"}},
	{name: "hack/debpkg.sh", args: []string{"shellcheck", "shellcheck"}, bin: "shellcheck", pkgs: []string{"shellcheck"}},
}

func (s debScript) title() string { return strings.TrimSpace(s.name + " " + strings.Join(s.args, " ")) }

// The policy-rc.d states a machine can have. imagePolicy is this machine's image's file,
// byte for byte (/usr/sbin/policy-rc.d here: Docker's base images ship it).
const imagePolicy = `#!/bin/sh

# For most Docker users, "apt-get install" only happens during "docker build",
# where starting services doesn't work and often fails in humorous ways. This
# prevents those failures by stopping the services from attempting to start.

exit 101
`

var (
	noPolicy         = fileState{}
	presentPolicy    = fileState{Exists: true, Mode: 0o755, Content: imagePolicy}
	permissivePolicy = fileState{Exists: true, Mode: 0o700, Content: "#!/bin/sh\nexit 0\n"}
	linkedPolicy     = fileState{Exists: true, Link: "../etc/policy-rc.d"} // its target: permissivePolicy
)

// setPolicy puts a policy-rc.d state in the world.
func (w *world) setPolicy(st fileState) {
	w.t.Helper()
	switch {
	case st.Link != "":
		w.write("etc/policy-rc.d", permissivePolicy.Content)
		require.NoError(w.t, os.Symlink(st.Link, w.policy))
	case st.Exists:
		require.NoError(w.t, os.WriteFile(w.policy, []byte(st.Content), st.Mode))
		require.NoError(w.t, os.Chmod(w.policy, st.Mode))
	}
}

// Calls the stand-ins log for an install of pkgs: with the lists there, and on a fresh image
// (or after an interrupted install), where the first install fails and the script recovers.
func installCalls(pkgs []string) []string {
	return []string{"apt-get install " + strings.Join(pkgs, " ")}
}

func recoveredInstallCalls(pkgs []string) []string {
	install := "apt-get install " + strings.Join(pkgs, " ")
	return []string{install, "dpkg --configure -a", "apt-get update ", install}
}

// Each set-up script that installs a Debian package, on each state a machine can be in when it
// runs, against stand-ins of apt-get, dpkg and id. The first row is the fresh machine on which
// the first `make test` failed: the package absent, policy-rc.d present, no package lists.
func TestDebianInstallStandIn(t *testing.T) {
	type machine struct {
		policy                              fileState
		present, notRoot, noLists, aptFails bool
		dpkgInterrupted                     bool
	}
	cases := []struct {
		name  string
		m     machine
		code  int
		calls func(pkgs []string) []string
		err   string // in stderr, with %s the packages
	}{
		{name: "fresh machine: absent, policy-rc.d present, no package lists",
			m: machine{policy: presentPolicy, noLists: true}, calls: recoveredInstallCalls},
		{name: "absent, no policy-rc.d", m: machine{policy: noPolicy}, calls: installCalls},
		{name: "absent, policy-rc.d present", m: machine{policy: presentPolicy}, calls: installCalls},
		{name: "absent, a policy-rc.d that lets services start", m: machine{policy: permissivePolicy}, calls: installCalls},
		{name: "absent, policy-rc.d a link", m: machine{policy: linkedPolicy}, calls: installCalls},
		{name: "absent, an install left half-done by an earlier run",
			m: machine{policy: presentPolicy, dpkgInterrupted: true}, calls: recoveredInstallCalls},
		{name: "present", m: machine{policy: presentPolicy, present: true}},
		{name: "present, not root", m: machine{policy: noPolicy, present: true, notRoot: true}},
		{name: "absent, not root", m: machine{policy: presentPolicy, notRoot: true}, code: 1,
			err: "is not installed and this is not root: as root, run apt-get install %s"},
		{name: "absent, apt-get fails", m: machine{policy: presentPolicy, aptFails: true}, code: 1,
			calls: recoveredInstallCalls, err: "apt-get install %s failed"},
		{name: "absent, apt-get fails, no policy-rc.d", m: machine{policy: noPolicy, aptFails: true}, code: 1,
			calls: recoveredInstallCalls, err: "apt-get install %s failed"},
	}
	for _, s := range debScripts {
		// hack/debpkg.sh also looks in the machine's sbin folders, which the world cannot hide.
		for _, dir := range []string{"/usr/sbin", "/sbin"} {
			require.NoFileExists(t, filepath.Join(dir, s.bin))
		}
		for _, c := range cases {
			t.Run(s.title()+"/"+c.name, func(t *testing.T) {
				w := newWorld(t)
				w.setPolicy(c.m.policy)
				if c.m.notRoot {
					w.write("state/uid", "1000\n")
				}
				if c.m.noLists {
					require.NoError(t, os.Remove(filepath.Join(w.state, "lists")))
				}
				if c.m.aptFails {
					w.write("state/apt-fails", "")
				}
				if c.m.dpkgInterrupted {
					w.write("state/dpkg-interrupted", "")
				}
				if c.m.present {
					w.write("usr/bin/"+s.bin, "#!/bin/sh\n")
				}
				sbinBefore := names(t, filepath.Dir(w.policy))

				r := w.runScript(s.name, s.args)

				require.Equal(t, c.code, r.code, "exit status; stderr:\n%s", r.stderr)
				var wantCalls []string
				if c.calls != nil {
					wantCalls = c.calls(s.pkgs)
				}
				assert.Equal(t, wantCalls, w.lines("calls"), "the stand-ins' calls")
				if c.code == 0 {
					assert.Equal(t, filepath.Join(w.usrBin, s.bin)+"\n", r.stdout, "stdout is the path alone")
				} else {
					assert.Empty(t, r.stdout)
					assert.Contains(t, r.stderr, fmt.Sprintf(c.err, strings.Join(s.pkgs, " ")))
				}
				if c.code == 0 && !c.m.present {
					assert.Equal(t, s.pkgs, w.lines("installed"), "each package installed once")
				} else {
					assert.Empty(t, w.lines("installed"))
				}
				assert.Empty(t, w.lines("services-started"), "no package's service started")
				assert.Equal(t, c.m.policy, stateOf(t, w.policy), "policy-rc.d as it was")
				assert.Equal(t, sbinBefore, names(t, filepath.Dir(w.policy)), "nothing left beside policy-rc.d")
			})
		}
	}
}

// A second run finds what the first installed; two runs at once install once, the second
// waiting on the lock, and both print the path.
func TestDebianInstallAgainStandIn(t *testing.T) {
	for _, s := range debScripts {
		t.Run(s.title()+"/second run", func(t *testing.T) {
			w := newWorld(t)
			w.setPolicy(presentPolicy)
			first := w.runScript(s.name, s.args)
			second := w.runScript(s.name, s.args)
			for _, r := range []result{first, second} {
				require.Equal(t, 0, r.code, r.stderr)
				assert.Equal(t, filepath.Join(w.usrBin, s.bin)+"\n", r.stdout)
			}
			assert.Equal(t, installCalls(s.pkgs), w.lines("calls"), "the second run calls nothing")
			assert.Equal(t, s.pkgs, w.lines("installed"))
			assert.Equal(t, presentPolicy, stateOf(t, w.policy))
		})
		t.Run(s.title()+"/two at once", func(t *testing.T) {
			w := newWorld(t)
			w.setPolicy(presentPolicy)
			first, second := w.twoAtOnce(s.name, s.args...)
			for _, r := range []result{first, second} {
				require.Equal(t, 0, r.code, r.stderr)
				assert.Equal(t, filepath.Join(w.usrBin, s.bin)+"\n", r.stdout)
			}
			assert.Contains(t, second.stderr, "another install is running")
			assert.Equal(t, installCalls(s.pkgs), w.lines("calls"), "one install")
			assert.Equal(t, s.pkgs, w.lines("installed"))
			assert.Empty(t, w.lines("services-started"))
			assert.Equal(t, presentPolicy, stateOf(t, w.policy))
		})
	}
}

// A run killed in the middle of its install (SIGKILL: no trap runs) leaves its own policy-rc.d
// in place and the machine's renamed aside; the next run that installs puts them back as they
// were before it, whatever they were.
func TestDebianInstallAfterAKilledRunStandIn(t *testing.T) {
	s := debScripts[0]
	for name, before := range map[string]fileState{"present": presentPolicy, "absent": noPolicy, "a link": linkedPolicy} {
		t.Run("policy-rc.d "+name, func(t *testing.T) {
			w := newWorld(t)
			w.setPolicy(before)
			entered, _ := w.holdInstalls()
			killed := w.start(s.name, s.args)
			waitFor(t, "the run to reach its install", entered)
			require.NoError(t, syscall.Kill(-killed.cmd.Process.Pid, syscall.SIGKILL))
			killed.wait(t)
			require.NotEqual(t, before, stateOf(t, w.policy), "the killed run's policy-rc.d is in place")

			require.NoError(t, os.Remove(filepath.Join(w.state, "hold")))
			require.NoError(t, os.Remove(filepath.Join(w.state, "calls")))
			r := w.runScript(s.name, s.args)
			require.Equal(t, 0, r.code, r.stderr)
			assert.Equal(t, filepath.Join(w.usrBin, s.bin)+"\n", r.stdout)
			assert.Equal(t, installCalls(s.pkgs), w.lines("calls"))
			assert.Empty(t, w.lines("services-started"))
			assert.Equal(t, before, stateOf(t, w.policy), "policy-rc.d as it was before the killed run")
			sbin := []string{"policy-rc.d"}
			if !before.Exists {
				sbin = nil
			}
			assert.Equal(t, sbin, names(t, filepath.Dir(w.policy)), "nothing left beside policy-rc.d")
		})
	}
}

// chromium.sh takes the browser $INFERPLANE_CHROMIUM names, installing nothing.
func TestChromiumFromEnvStandIn(t *testing.T) {
	w := newWorld(t)
	w.write("opt/chrome/chrome", "#!/bin/sh\n")
	browser := filepath.Join(w.dir, "opt", "chrome", "chrome")
	r := w.runScript("hack/chromium.sh", nil, "INFERPLANE_CHROMIUM="+browser)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, browser+"\n", r.stdout)
	assert.Empty(t, w.lines("calls"))
}

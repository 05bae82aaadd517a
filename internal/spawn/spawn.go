// Package spawn starts child processes that die with their parent: Pdeathsig
// (syscall.SysProcAttr) fires when the *thread* that started the child ends, not the process,
// and Go may retire any thread but one it keeps locked. Do runs every start on one OS thread
// that never exits.
package spawn

import (
	"runtime"
	"sync"
)

var spawner struct {
	once sync.Once
	jobs chan func()
}

// Do runs f (an exec.Cmd's Start) on the spawner thread and returns when it returned.
func Do(f func()) {
	spawner.once.Do(func() {
		spawner.jobs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for job := range spawner.jobs {
				job()
			}
		}()
	})
	done := make(chan struct{})
	spawner.jobs <- func() { f(); close(done) }
	<-done
}

package agent

import (
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

// reaper owns all waiting for children in this process. On SIGCHLD it reaps
// every exited child with wait4(-1, WNOHANG) and hands the status to the
// command the agent registered under that pid; statuses of other children
// (orphans re-parented to us) are discarded.
//
// A command is registered while r.mu is held across its fork, and the reaper
// takes r.mu before it looks a pid up, so a command that exits at once is
// still found. Nothing else in the process may wait for children: os/exec's
// Cmd.Wait would race with wait4(-1).
type reaper struct {
	mu    sync.Mutex
	procs map[int]*child
}

// child is a command the agent started. done is closed once status is set.
type child struct {
	pid    int
	done   chan struct{}
	status syscall.WaitStatus
}

var (
	reaperOnce   sync.Once
	globalReaper *reaper
)

// startReaper starts the process-wide reaper once and returns it.
func startReaper(log *slog.Logger) *reaper {
	reaperOnce.Do(func() {
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
			log.Warn("cannot become a child subreaper; orphans will not be reaped here", "err", errno)
		}
		r := &reaper{procs: make(map[int]*child)}
		sigc := make(chan os.Signal, 1)
		signal.Notify(sigc, syscall.SIGCHLD)
		go func() {
			r.reapAll() // zombies from before we listened
			for range sigc {
				r.reapAll()
			}
		}()
		globalReaper = r
	})
	return globalReaper
}

// reapAll reaps every child that has exited. Signals coalesce, so it loops
// until none is left.
func (r *reaper) reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 { // ECHILD, or children left but none exited
			return
		}
		if !ws.Exited() && !ws.Signaled() {
			continue // stopped or continued; not without WUNTRACED, but be safe
		}
		r.mu.Lock()
		c := r.procs[pid]
		delete(r.procs, pid)
		r.mu.Unlock()
		if c != nil {
			c.status = ws
			close(c.done)
		}
	}
}

// start forks and execs argv0 and registers the child before the reaper can
// see it exit.
func (r *reaper) start(argv0 string, argv []string, attr *syscall.ProcAttr) (*child, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err != nil {
		return nil, err
	}
	c := &child{pid: pid, done: make(chan struct{})}
	r.procs[pid] = c
	return c, nil
}

// killGroup sends SIGKILL to the child's process group (its pgid is its pid).
// A group that is already gone is not an error.
func (c *child) killGroup() {
	_ = syscall.Kill(-c.pid, syscall.SIGKILL)
}

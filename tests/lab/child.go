package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Children are started from one goroutine locked to its OS thread: Pdeathsig fires when the
// thread that forked the child dies, so that thread must live as long as the lab.
type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

var spawnCh = func() chan spawnReq {
	ch := make(chan spawnReq)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives until the process exits
		for r := range ch {
			r.res <- r.cmd.Start()
		}
	}()
	return ch
}()

// child is a supervised child process: restarted with backoff when it exits on its own,
// stopped (whole process group) on lab shutdown.
type child struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string
	stopSig syscall.Signal

	mu       sync.Mutex
	cmd      *exec.Cmd
	stopping bool
	done     chan struct{} // closed when the supervisor loop has ended
	exited   chan struct{} // closed when the current process exits
	restarts int
	stopCh   chan struct{} // closed by stop()
	stopOnce sync.Once
	onDeath  func(error) // called when it keeps dying
}

func (c *child) startOnce() error {
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "\n===== ferry-lab: starting %s at %s =====\n", c.name, time.Now().Format(time.RFC3339))
	cmd := exec.Command(c.path, c.args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Stdin = nil
	cmd.Env = c.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	res := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, res: res}
	if err := <-res; err != nil {
		logf.Close()
		return err
	}
	logf.Close() // the child holds its own copy
	c.mu.Lock()
	c.cmd = cmd
	c.exited = make(chan struct{})
	stopping := c.stopping
	c.mu.Unlock()
	if stopping { // stop() raced with a restart: it signalled the previous process
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return nil
}

func (c *child) run() error {
	c.done = make(chan struct{})
	c.stopCh = make(chan struct{})
	if err := c.startOnce(); err != nil {
		close(c.done)
		return err
	}
	go func() {
		defer close(c.done)
		backoff := time.Second
		for {
			c.mu.Lock()
			cmd, exited := c.cmd, c.exited
			c.mu.Unlock()
			started := time.Now()
			err := cmd.Wait()
			// kill anything the child left in its process group
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			close(exited)
			c.mu.Lock()
			stopping := c.stopping
			c.mu.Unlock()
			if stopping {
				return
			}
			if time.Since(started) > time.Minute {
				backoff = time.Second
			}
			c.restarts++
			progress("%s exited unexpectedly (%v); restart #%d in %s; log %s", c.name, err, c.restarts, backoff, c.logPath)
			if c.restarts > 10 && c.onDeath != nil {
				c.onDeath(fmt.Errorf("%s keeps exiting (%d restarts), see %s:\n%s", c.name, c.restarts, c.logPath, tail(c.logPath, 20)))
			}
			select {
			case <-time.After(backoff):
			case <-c.stopCh:
				return
			}
			if backoff < 16*time.Second {
				backoff *= 2
			}
			c.mu.Lock()
			if c.stopping {
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			if err := c.startOnce(); err != nil {
				progress("%s: restart failed: %v", c.name, err)
				if c.onDeath != nil {
					c.onDeath(err)
				}
				return
			}
		}
	}()
	return nil
}

// stop sends stopSig to the child's process group, then SIGKILL after the grace period.
func (c *child) stop(grace time.Duration) {
	c.mu.Lock()
	c.stopping = true
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if c.stopCh != nil {
		c.stopOnce.Do(func() { close(c.stopCh) })
	}
	if cmd == nil || cmd.Process == nil {
		return
	}
	pid := cmd.Process.Pid
	sig := c.stopSig
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	_ = syscall.Kill(-pid, sig)
	select {
	case <-exited:
	case <-time.After(grace):
		progress("%s did not stop within %s, killing it", c.name, grace)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-exited
	}
	if c.done != nil {
		<-c.done
	}
}

package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The control socket, DIR/control.sock: one line "restart NAME" restarts one component of the
// table (stop, start again on the same ports and data, wait for its probe) while the others keep
// running, and answers "ok" or "error: ..." — how a test restarts the apiserver under a running
// controller. Only components that a restart cannot break are allowed.
var restartable = []string{"apiserver", "controller-manager", "s3"}

func (l *lab) controlPath() string { return filepath.Join(l.dir, "control.sock") }

// serveControl listens on the control socket until ctx ends.
func (l *lab) serveControl(ctx context.Context) error {
	path := l.controlPath()
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
		_ = os.Remove(path)
	}()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go l.control(ctx, conn)
		}
	}()
	return nil
}

func (l *lab) control(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil && line == "" {
		return
	}
	verb, name, _ := strings.Cut(strings.TrimSpace(line), " ")
	switch {
	case verb != "restart":
		fmt.Fprintf(conn, "error: unknown command %q (restart NAME)\n", verb)
	default:
		if err := l.restart(ctx, name); err != nil {
			fmt.Fprintf(conn, "error: %v\n", err)
			return
		}
		fmt.Fprintln(conn, "ok")
	}
}

// restart stops one component and starts it again, as lab start would, once it is ready.
func (l *lab) restart(ctx context.Context, name string) error {
	if !slices.Contains(restartable, name) {
		return fmt.Errorf("%q cannot be restarted alone (one of %s)", name, strings.Join(restartable, ", "))
	}
	i := slices.IndexFunc(l.comps, func(c *component) bool { return c.name == name })
	if i < 0 {
		return errors.New("no such component")
	}
	c := l.comps[i]
	l.restartMu.Lock()
	defer l.restartMu.Unlock()
	l.mu.Lock()
	stop := l.stops[name]
	delete(l.stops, name)
	l.mu.Unlock()
	started := time.Now()
	progress("%s: restarting (asked on the control socket)", name)
	if stop != nil {
		stop()
	}
	ready := map[string]chan struct{}{}
	for _, n := range c.needs {
		ready[n] = make(chan struct{})
		close(ready[n])
	}
	if err := l.bringUp(ctx, c, ready); err != nil {
		return err
	}
	progress("%s: restarted in %.1fs", name, time.Since(started).Seconds())
	return nil
}

// restartComponent asks the lab in dir to restart a component (what the harness does, in Go).
func restartComponent(dir, name string, timeout time.Duration) error {
	conn, err := net.DialTimeout("unix", filepath.Join(dir, "control.sock"), timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(conn, "restart %s\n", name); err != nil {
		return err
	}
	answer, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if a := strings.TrimSpace(answer); a != "ok" {
		return errors.New(cmp.Or(a, "no answer"))
	}
	return nil
}

package main

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// "restart NAME" on the control socket stops that component and starts it again (after what
// it needs, which keeps running), waits for its probe, and answers ok; anything else is refused.
func TestControlSocketRestartsOneComponent(t *testing.T) {
	dir, err := os.MkdirTemp("", "lab") // short: a unix socket path has ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var mu sync.Mutex
	var events []string
	record := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	starts := 0
	fake := func(name string, needs ...string) *component {
		return &component{name: name, needs: needs,
			start: func(context.Context) (func(), error) {
				record("start " + name)
				if name == "apiserver" {
					starts++
				}
				return func() { record("stop " + name) }, nil
			},
			ready: probe{what: "up", timeout: time.Second, every: time.Millisecond, check: func(context.Context) error {
				record("probe " + name)
				return nil
			}},
		}
	}
	l := &lab{dir: dir, logDir: dir, comps: []*component{fake("etcd"), fake("apiserver", "etcd")},
		fatal: make(chan error, 1), stops: map[string]func(){}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := l.startComponents(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.serveControl(ctx); err != nil {
		t.Fatal(err)
	}
	events = nil
	if err := restartComponent(dir, "apiserver", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if want := []string{"stop apiserver", "start apiserver", "probe apiserver"}; !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}
	if err := restartComponent(dir, "etcd", 10*time.Second); err == nil || !strings.Contains(err.Error(), "cannot be restarted alone") {
		t.Errorf("etcd restart: %v", err)
	}
	if err := restartComponent(dir, "nope", 10*time.Second); err == nil {
		t.Error("an unknown component was restarted")
	}
	l.stop()
	if starts != 2 || events[len(events)-1] != "stop etcd" {
		t.Errorf("after stop: %d starts, events %v", starts, events)
	}
}

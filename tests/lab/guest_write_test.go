package main

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var passLine = regexp.MustCompile(`^pass=(\d+) blocks=(\d+) bytes=(\d+) disk="([^"]+)" written=([\d,]+)$`)

// passBlocks reads the blocks of a pass line.
func passBlocks(t *testing.T, line string) []int64 {
	t.Helper()
	m := passLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("not a pass line: %q", line)
	}
	var out []int64
	for _, s := range strings.Split(m[5], ",") {
		b, _ := strconv.ParseInt(s, 10, 64)
		out = append(out, b)
	}
	if n, _ := strconv.Atoi(m[2]); n != len(out) {
		t.Errorf("%q: blocks=%s, %d listed", line, m[2], len(out))
	}
	if n, _ := strconv.ParseInt(m[3], 10, 64); n != int64(len(out))*vmfsBlock {
		t.Errorf("%q: bytes=%s", line, m[3])
	}
	return out
}

// `ferry-lab guest-write` writes P % of the disk's inner blocks, the same ones for the same seed,
// and what it writes is what the next snapshot's change id reports.
func TestGuestWriteWritesWhatChangeTrackingReports(t *testing.T) {
	cases := []struct {
		percent float64
		seed    uint64
		blocks  int
	}{
		{percent: 1, seed: 7, blocks: 102}, // 1 % of the 10238 blocks in [1 MiB, 10 GiB - 1 MiB)
		{percent: 0.001, seed: 7, blocks: 1},
		{percent: 0.05, seed: 8, blocks: 5},
	}
	for _, c := range cases {
		t.Run(strconv.FormatFloat(c.percent, 'g', -1, 64), func(t *testing.T) {
			l := newCBTLab(t)
			s1 := l.snapshot("round-1")
			id := l.snapshotDisk(s1).changeID
			var out bytes.Buffer
			if err := guestWrite(l.ctx, l.stateDir, guestWriteSpec{vm: "DC0_H0_VM0", percent: c.percent, seed: c.seed}, &out); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("one pass, one line: %q", out.String())
			}
			written := passBlocks(t, lines[0])
			if len(written) != c.blocks || !slices.IsSorted(written) || written[0] < 1 || written[len(written)-1] > 10238 {
				t.Fatalf("written %v", written)
			}
			s2 := l.snapshot("round-2")
			if got := l.changed(&s2, id); !slices.Equal(got, written) {
				t.Errorf("changed %v, written %v", got, written)
			}

			// The same seed draws the same blocks.
			out.Reset()
			if err := guestWrite(l.ctx, l.stateDir, guestWriteSpec{vm: "DC0_H0_VM0", percent: c.percent, seed: c.seed}, &out); err != nil {
				t.Fatal(err)
			}
			if again := passBlocks(t, strings.TrimSpace(out.String())); !slices.Equal(again, written) {
				t.Errorf("seed %d drew %v, then %v", c.seed, written, again)
			}
		})
	}
}

// A guest writes only while its VM runs: refused when off, and with --every it stops once the VM
// is powered off.
func TestGuestWriteOnlyWhileTheVMRuns(t *testing.T) {
	l := newCBTLab(t)
	var mu sync.Mutex
	var out bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(p)
	})
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(l.ctx, time.Minute)
	defer cancel()
	go func() {
		done <- guestWrite(ctx, l.stateDir, guestWriteSpec{vm: "DC0_H0_VM0", percent: 0.01, seed: 3, every: 10 * time.Millisecond}, w)
	}()
	for {
		mu.Lock()
		passes := strings.Count(out.String(), "pass=")
		mu.Unlock()
		if passes >= 3 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.power(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; last != "DC0_H0_VM0 is poweredOff: stopping" {
		t.Errorf("last line %q", last)
	}
	first, second := passBlocks(t, lines[0]), passBlocks(t, lines[1])
	if slices.Equal(first, second) {
		t.Errorf("every pass writes the same blocks: %v", first)
	}

	err := guestWrite(l.ctx, l.stateDir, guestWriteSpec{vm: "DC0_H0_VM0", percent: 1, seed: 1}, w)
	if err == nil || !strings.Contains(err.Error(), "poweredOff") {
		t.Errorf("a powered-off VM: %v", err)
	}
	if code := runGuestWrite([]string{"--state-dir", l.stateDir, "--vm", "DC0_H0_VM0", "--percent", "1"}); code != 1 {
		t.Errorf("exit status %d for a powered-off VM", code)
	}
	if code := runGuestWrite([]string{"--state-dir", l.stateDir, "--vm", "DC0_H0_VM0"}); code != 2 {
		t.Errorf("exit status %d without --percent", code)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

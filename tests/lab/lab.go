package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/component-base/version"
)

var k8sVersion = version.Get().GitVersion

// stderr progress, also copied to DIR/logs/lab.log
var progressOut io.Writer = os.Stderr
var labStart = time.Now()

func progress(format string, args ...any) {
	fmt.Fprintf(progressOut, "ferry-lab [%5.1fs] %s\n", time.Since(labStart).Seconds(), fmt.Sprintf(format, args...))
}

// component is one part of the lab: one entry of the table in components.go. The lab allocates
// its ports, starts it once the components it needs are ready, waits for its probe, writes its
// entry into lab.json and stops it, all by walking that table.
type component struct {
	name  string   // progress prefix; its log is DIR/logs/NAME.log unless log says otherwise
	ports []string // its keys in ports.json: picked free at the first start, kept after
	needs []string // components (earlier in the table) that must be ready before it starts
	// start starts it and returns how to stop it (nil: nothing to stop), with a stop function
	// also when it fails halfway. Its ctx ends with the lab's start-up: nothing may keep it.
	start func(ctx context.Context) (stop func(), err error)
	ready probe               // zero probe: ready as soon as start returns
	json  string              // its key in lab.json ("" for none); info gives the value
	info  func() (any, error) // its lab.json entry, asked for once every component is ready
	url   func() string       // where it answers, for the "ready" progress line
	log   string              // the log (under DIR/logs) whose tail explains a failure
}

// probe says when a started component is ready.
type probe struct {
	what    string                          // what ready means, for progress and errors
	timeout time.Duration                   // how long it may take
	every   time.Duration                   // how often to look
	check   func(ctx context.Context) error // nil once ready, otherwise why not yet
}

// failed marks a probe error after which waiting longer cannot help: the component died.
type failed struct{ error }

func (f failed) Unwrap() error { return f.error }

// waitReady calls p.check every p.every until it returns nil. It fails after p.timeout, or at
// once when check returns a failed error, with check's last answer and the last lines of logPath.
func waitReady(ctx context.Context, name, logPath string, p probe) error {
	deadline := time.Now().Add(p.timeout)
	for {
		err := p.check(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var f failed
		if gaveUp := errors.As(err, &f); gaveUp || time.Now().After(deadline) {
			if gaveUp {
				err = fmt.Errorf("%s failed before it was ready (%s): %w", name, p.what, f.error)
			} else {
				err = fmt.Errorf("%s not ready within %s (%s): %w", name, p.timeout, p.what, err)
			}
			if t := tail(logPath, 30); t != "" {
				err = fmt.Errorf("%w\nlast lines of %s:\n%s", err, logPath, t)
			}
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(p.every):
		}
	}
}

type secrets struct {
	VCUser    string `json:"vcenterUsername"`
	VCPass    string `json:"vcenterPassword"`
	AccessKey string `json:"s3AccessKey"`
	SecretKey string `json:"s3SecretKey"`
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func writeJSON(path string, v any, mode os.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), mode)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// loadOrCreateJSON reads path into v, or calls create to fill v and writes it.
func loadOrCreateJSON(path string, v any, create func() error) error {
	if b, err := os.ReadFile(path); err == nil {
		return json.Unmarshal(b, v)
	}
	if err := create(); err != nil {
		return err
	}
	return writeJSON(path, v, 0o600)
}

func checkPortFree(name string, port int) error {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return fmt.Errorf("port %d (%s, recorded in ports.json) is not free: is another lab running on this state dir? (%v)", port, name, err)
	}
	return l.Close()
}

func runLab(args []string) int {
	fs := flag.NewFlagSet("ferry-lab", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "", "state directory (required); created if missing, reused on restart")
	vms := fs.Int("vms", 16, "number of VMs in the simulated vCenter (up to 10000)")
	stopOnEOF := fs.Bool("stop-on-stdin-eof", false, "stop the lab when stdin reaches EOF")
	controllers := fs.String("controllers", defaultControllers, "kube-controller-manager --controllers value")
	kubevirt := fs.Bool("kubevirt", false, "also run KubeVirt's own virt-api and virt-controller (ferry-kubevirt, next to ferry-lab), with KubeVirt's CRDs, RBAC, KubeVirt CR and webhooks (virt-api on 127.0.0.1)")
	contextName := fs.String("context", defaultContext, "name of the cluster and context in DIR/kubeconfig (its user is NAME-admin), so that kubeconfigs of two labs merge")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: ferry-lab --state-dir DIR [--vms N] [--stop-on-stdin-eof] [--kubevirt]\n       ferry-lab kubectl ARGS... | kubectl ARGS... (via link named kubectl)\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *stateDir == "" {
		fs.Usage()
		return 2
	}
	if *contextName == "" || strings.ContainsAny(*contextName, ":/ ") {
		fmt.Fprintln(os.Stderr, "ferry-lab: --context must be a non-empty name without ':', '/' or spaces")
		return 2
	}
	if *vms < 0 || *vms > 100000 {
		fmt.Fprintln(os.Stderr, "ferry-lab: --vms must be between 0 and 100000")
		return 2
	}
	dir, err := filepath.Abs(*stateDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferry-lab:", err)
		return 1
	}
	l := &lab{dir: dir, vms: *vms, controllers: *controllers, context: *contextName, kubevirt: *kubevirt}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Stop on SIGTERM/SIGINT, and on stdin EOF when asked.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	stopReason := make(chan string, 4)
	go func() {
		s := <-sigs
		stopReason <- "signal " + s.String()
		cancel()
	}()
	if *stopOnEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stopReason <- "stdin reached EOF"
			cancel()
		}()
	}

	err = l.start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			progress("stopping during start-up (%s)", <-stopReason)
			l.stop()
			progress("stopped")
			return 0
		}
		progress("FAILED: %v", err)
		l.stop()
		return 1
	}
	var where []string
	for _, c := range l.comps {
		if c.url != nil {
			where = append(where, cmp.Or(c.json, c.name)+" "+c.url())
		}
	}
	if err := l.serveControl(ctx); err != nil {
		progress("FAILED: %v", err)
		l.stop()
		return 1
	}
	progress("ready in %.1fs: %s (state %s)", time.Since(labStart).Seconds(), strings.Join(where, ", "), dir)
	fmt.Fprintln(os.Stdout, "ready")

	// Stay up; a child that exits unexpectedly is restarted by its supervisor.
	select {
	case <-ctx.Done():
	case err := <-l.fatal:
		progress("FAILED: %v", err)
		l.stop()
		return 1
	}
	progress("stopping (%s)", <-stopReason)
	l.stop()
	progress("stopped")
	return 0
}

type lab struct {
	dir         string
	vms         int
	controllers string
	context     string // cluster and context name in DIR/kubeconfig
	kubevirt    bool   // --kubevirt: KubeVirt's virt-api and virt-controller too (kubevirt.go)

	lockFile *os.File
	logDir   string
	binDir   string
	env      []string // environment for children, taken before anything starts
	pki      *pki
	ports    map[string]int // ports.json
	secrets  secrets
	comps    []*component // the table, from components()
	fatal    chan error   // a child that keeps dying

	componentState // what the components' start functions keep for their probes and entries

	mu        sync.Mutex
	stops     map[string]func() // component name -> how to stop it
	stopOnce  sync.Once
	restartMu sync.Mutex // one restart at a time (restart.go)
}

func (l *lab) start(ctx context.Context) error {
	if err := l.prepare(); err != nil {
		return err
	}
	if err := l.startComponents(ctx); err != nil {
		return err
	}
	return l.writeLabJSON()
}

// prepare sets up what every component shares: the state dir and its lock, logs, ports,
// credentials and certificates.
func (l *lab) prepare() error {
	l.fatal = make(chan error, 8)
	l.stops = map[string]func(){}
	l.env = os.Environ()
	l.comps = l.components()
	if err := checkTable(l.comps); err != nil {
		return fmt.Errorf("component table: %w", err)
	}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	l.logDir = filepath.Join(l.dir, "logs")
	if err := os.MkdirAll(l.logDir, 0o755); err != nil {
		return err
	}
	if lf, err := os.OpenFile(filepath.Join(l.logDir, "lab.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		progressOut = io.MultiWriter(os.Stderr, lf)
	}
	// One lab per state dir.
	lf, err := os.OpenFile(filepath.Join(l.dir, "lab.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("another ferry-lab is running on %s (lab.lock is held)", l.dir)
	}
	l.lockFile = lf
	// written again once ready
	_ = os.Remove(filepath.Join(l.dir, "lab.json"))
	_ = os.Remove(filepath.Join(l.dir, "inventory.json"))

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	l.binDir = filepath.Dir(exe)
	progress("starting %s, %s, state dir %s", labVersion(), filepath.Base(exe), l.dir)

	if err := l.allocatePorts(); err != nil {
		return fmt.Errorf("ports.json: %w", err)
	}
	if err := loadOrCreateJSON(filepath.Join(l.dir, "secrets.json"), &l.secrets, func() error {
		l.secrets = secrets{
			VCUser: "administrator@vsphere.local", VCPass: "Lab-" + randHex(8),
			AccessKey: "FERRYLAB" + strings.ToUpper(randHex(6)), SecretKey: randHex(20),
		}
		return nil
	}); err != nil {
		return fmt.Errorf("secrets.json: %w", err)
	}
	l.pki = newPKI(filepath.Join(l.dir, "pki"))
	if err := l.pki.ensure(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

// checkTable rejects a component table the lab could not run: names and ports.json and
// lab.json keys must be unique, and needs must name earlier entries (so there is no cycle).
func checkTable(comps []*component) error {
	names := map[string]bool{}
	ports := map[string]bool{}
	keys := map[string]bool{"stateDir": true, "pid": true}
	for _, c := range comps {
		switch {
		case c.name == "" || names[c.name]:
			return fmt.Errorf("component name %q is empty or not unique", c.name)
		case c.start == nil:
			return fmt.Errorf("component %s has no start function", c.name)
		case (c.ready.check == nil) != (c.ready.timeout == 0) || (c.ready.check != nil && c.ready.every <= 0):
			return fmt.Errorf("component %s: a probe needs check, timeout and every", c.name)
		case (c.json == "") != (c.info == nil):
			return fmt.Errorf("component %s: a lab.json entry needs both json and info", c.name)
		case c.json != "" && keys[c.json]:
			return fmt.Errorf("component %s: lab.json key %q is taken", c.name, c.json)
		}
		for _, n := range c.needs {
			if !names[n] {
				return fmt.Errorf("component %s needs %q, which is not an earlier entry", c.name, n)
			}
		}
		for _, p := range c.ports {
			if ports[p] {
				return fmt.Errorf("component %s: ports.json key %q is taken", c.name, p)
			}
			ports[p] = true
		}
		names[c.name] = true
		if c.json != "" {
			keys[c.json] = true
		}
	}
	return nil
}

// allocatePorts reads ports.json and picks a free port for every key a component lists that it
// lacks (all of them at the first start), so a restart keeps its URLs. Every port must be free.
func (l *lab) allocatePorts() error {
	path := filepath.Join(l.dir, "ports.json")
	l.ports = map[string]int{}
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &l.ports); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	taken := map[int]bool{}
	for _, p := range l.ports {
		taken[p] = true
	}
	added := false
	for _, c := range l.comps {
		for _, key := range c.ports {
			if l.ports[key] != 0 {
				continue
			}
			for {
				p, err := freePort()
				if err != nil {
					return err
				}
				if !taken[p] {
					taken[p], l.ports[key], added = true, p, true
					break
				}
			}
		}
	}
	if added {
		if err := writeJSON(path, l.ports, 0o600); err != nil {
			return err
		}
	}
	for _, c := range l.comps {
		for _, key := range c.ports {
			if err := checkPortFree(key, l.ports[key]); err != nil {
				return err
			}
		}
	}
	return nil
}

// port is the port recorded under key in ports.json; key must be listed by some component.
func (l *lab) port(key string) int {
	p, ok := l.ports[key]
	if !ok {
		panic("ferry-lab: no component lists port " + key)
	}
	return p
}

// startComponents starts every component once the components it needs are ready (the others
// in parallel) and returns when all are ready, or at the first failure once every start
// function has returned.
func (l *lab) startComponents(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(map[string]chan struct{}, len(l.comps))
	for _, c := range l.comps {
		ready[c.name] = make(chan struct{})
	}
	results := make(chan error, len(l.comps))
	var wg sync.WaitGroup
	for _, c := range l.comps {
		wg.Go(func() {
			err := l.bringUp(ctx, c, ready)
			if err == nil {
				close(ready[c.name])
			}
			results <- err
		})
	}
	var err error
	for pending := len(l.comps); pending > 0 && err == nil; {
		select {
		case err = <-results:
			pending--
		case err = <-l.fatal:
		}
	}
	cancel()
	wg.Wait()
	return err
}

func (l *lab) bringUp(ctx context.Context, c *component, ready map[string]chan struct{}) error {
	for _, n := range c.needs {
		select {
		case <-ready[n]:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	stop, err := c.start(ctx)
	if stop != nil {
		l.mu.Lock()
		l.stops[c.name] = stop
		l.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	if c.ready.check == nil {
		return nil
	}
	if err := waitReady(ctx, c.name, filepath.Join(l.logDir, cmp.Or(c.log, c.name+".log")), c.ready); err != nil {
		return err
	}
	progress("%s: ready (%s)", c.name, c.ready.what)
	return nil
}

// field is one member of an orderedObject: a JSON object whose members keep their order.
type field struct {
	key   string
	value any
}

type orderedObject []field

func (o orderedObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		k, err := json.Marshal(f.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// writeLabJSON writes DIR/lab.json: stateDir, pid, then every component's entry in table order.
func (l *lab) writeLabJSON() error {
	doc := orderedObject{{"stateDir", l.dir}, {"pid", os.Getpid()}}
	for _, c := range l.comps {
		if c.json == "" {
			continue
		}
		v, err := c.info()
		if err != nil {
			return fmt.Errorf("%s: lab.json entry: %w", c.name, err)
		}
		doc = append(doc, field{c.json, v})
	}
	return writeJSON(filepath.Join(l.dir, "lab.json"), doc, 0o644)
}

// stop stops every component that started, each once the components that need it have
// stopped, the others in parallel.
func (l *lab) stop() {
	l.stopOnce.Do(func() {
		l.mu.Lock()
		stops := l.stops
		l.mu.Unlock()
		stopped := make(map[string]chan struct{}, len(l.comps))
		for _, c := range l.comps {
			stopped[c.name] = make(chan struct{})
		}
		var wg sync.WaitGroup
		for _, c := range l.comps {
			wg.Go(func() {
				defer close(stopped[c.name])
				for _, d := range l.comps {
					if slices.Contains(d.needs, c.name) {
						<-stopped[d.name]
					}
				}
				if stop := stops[c.name]; stop != nil {
					stop()
				}
			})
		}
		wg.Wait()
		if l.lockFile != nil { // not another lab's lab.json
			_ = os.Remove(filepath.Join(l.dir, "lab.json"))
			_ = l.lockFile.Close()
		}
	})
}

// tail returns the last n lines of a log file, for error messages.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

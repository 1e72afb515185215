package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
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

type ports struct {
	APIServer  int `json:"apiserver"`
	EtcdClient int `json:"etcdClient"`
	EtcdPeer   int `json:"etcdPeer"`
	Vcsim      int `json:"vcsim"`
	S3         int `json:"s3"`
}

type secrets struct {
	VCUser    string `json:"vcenterUsername"`
	VCPass    string `json:"vcenterPassword"`
	AccessKey string `json:"s3AccessKey"`
	SecretKey string `json:"s3SecretKey"`
}

type labJSON struct {
	StateDir   string `json:"stateDir"`
	PID        int    `json:"pid"`
	Kubeconfig string `json:"kubeconfig"`
	APIServer  struct {
		URL     string `json:"url"`
		Version string `json:"version"`
		CAFile  string `json:"caFile"`
	} `json:"apiserver"`
	VCenter struct {
		URL              string `json:"url"`
		Username         string `json:"username"`
		Password         string `json:"password"`
		ThumbprintSHA1   string `json:"thumbprintSha1"`
		ThumbprintSHA256 string `json:"thumbprintSha256"`
		Datacenter       string `json:"datacenter"`
		Datastore        string `json:"datastore"`
		DatastoreDir     string `json:"datastoreDir"`
		Inventory        string `json:"inventory"`
	} `json:"vcenter"`
	S3 struct {
		Endpoint  string `json:"endpoint"`
		Region    string `json:"region"`
		Bucket    string `json:"bucket"`
		AccessKey string `json:"accessKey"`
		SecretKey string `json:"secretKey"`
		DataDir   string `json:"dataDir"`
	} `json:"s3"`
}

const s3Bucket = "ferry-staging"

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
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
	b, _ := json.MarshalIndent(v, "", "  ")
	return writeFileAtomic(path, append(b, '\n'), 0o600)
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
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: ferry-lab --state-dir DIR [--vms N] [--stop-on-stdin-eof]\n       ferry-lab kubectl ARGS... | kubectl ARGS... (via link named kubectl)\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *stateDir == "" {
		fs.Usage()
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
	l := &lab{dir: dir, vms: *vms, controllers: *controllers}
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
	progress("ready in %.1fs: apiserver %s, vcenter %s, s3 %s (state %s)",
		time.Since(labStart).Seconds(), l.apiURL, l.vc.url, l.s3URL, dir)
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

	lockFile *os.File
	logDir   string
	binDir   string
	pki      *pki
	ports    ports
	secrets  secrets
	apiURL   string
	s3URL    string

	etcd     interface{ Close() }
	vc       *vcsimLab
	children []*child
	fatal    chan error

	stopOnce sync.Once
}

func (l *lab) start(ctx context.Context) error {
	l.fatal = make(chan error, 8)
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

	// Ports: chosen once, then reused so that URLs survive a restart.
	if err := loadOrCreateJSON(filepath.Join(l.dir, "ports.json"), &l.ports, func() error {
		seen := map[int]bool{}
		for _, p := range []*int{&l.ports.APIServer, &l.ports.EtcdClient, &l.ports.EtcdPeer, &l.ports.Vcsim, &l.ports.S3} {
			for {
				n, err := freePort()
				if err != nil {
					return err
				}
				if !seen[n] {
					seen[n] = true
					*p = n
					break
				}
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("ports.json: %w", err)
	}
	for name, p := range map[string]int{"apiserver": l.ports.APIServer, "etcd client": l.ports.EtcdClient,
		"etcd peer": l.ports.EtcdPeer, "vcsim": l.ports.Vcsim, "s3": l.ports.S3} {
		if err := checkPortFree(name, p); err != nil {
			return err
		}
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
	l.apiURL = fmt.Sprintf("https://127.0.0.1:%d", l.ports.APIServer)
	l.s3URL = fmt.Sprintf("http://127.0.0.1:%d", l.ports.S3)
	kubeconfig := filepath.Join(l.dir, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, l.apiURL, l.pki.caCert, l.pki.adminCert, l.pki.adminKey, "ferry-lab-admin"); err != nil {
		return err
	}
	kcmKubeconfig := filepath.Join(l.pki.dir, "controller-manager.kubeconfig")
	if err := writeKubeconfig(kcmKubeconfig, l.apiURL, l.pki.caCert, l.pki.kcmCert, l.pki.kcmKey, "system:kube-controller-manager"); err != nil {
		return err
	}

	// S3 first: it is a separate program and starts in parallel with everything else.
	if err := l.startS3(); err != nil {
		return err
	}

	progress("etcd: starting on 127.0.0.1:%d (data %s)", l.ports.EtcdClient, filepath.Join(l.dir, "etcd"))
	e, err := startEtcd(l.dir, l.ports.EtcdClient, l.ports.EtcdPeer, filepath.Join(l.logDir, "etcd.log"))
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	l.etcd = e
	progress("etcd: ready")

	l.startAPIServer()

	// vcsim runs in this process; build it while the apiserver starts.
	vcErr := make(chan error, 1)
	go func() {
		progress("vcsim: creating VPX inventory with %d VMs", l.vms)
		vcLog, err := os.OpenFile(filepath.Join(l.logDir, "vcsim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			log.SetOutput(vcLog) // vcsim logs through the standard logger
		}
		vc, err := startVcsim(ctx, l.dir, l.ports.Vcsim, l.vms, l.secrets.VCUser, l.secrets.VCPass, l.pki)
		if err != nil {
			vcErr <- fmt.Errorf("vcsim: %w", err)
			return
		}
		l.vc = vc
		if err := vc.writeInventory(ctx, filepath.Join(l.dir, "inventory.json")); err != nil {
			vcErr <- fmt.Errorf("vcsim inventory: %w", err)
			return
		}
		if err := vcsimAnswers(ctx, vc.url); err != nil {
			vcErr <- fmt.Errorf("vcsim: %w", err)
			return
		}
		progress("vcsim: ready at %s with %d VMs, datastore %s", vc.url, vc.vmCount, vc.dsDir)
		vcErr <- nil
	}()

	if err := l.waitAPIServer(ctx); err != nil {
		return err
	}
	l.startControllerManager()
	if err := l.installCRDs(ctx); err != nil {
		return err
	}
	if err := l.waitControllerManager(ctx); err != nil {
		return err
	}
	select {
	case err := <-vcErr:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := l.waitS3(ctx); err != nil {
		return err
	}
	return l.writeLabJSON(kubeconfig)
}

func (l *lab) writeLabJSON(kubeconfig string) error {
	var j labJSON
	j.StateDir = l.dir
	j.PID = os.Getpid()
	j.Kubeconfig = kubeconfig
	j.APIServer.URL = l.apiURL
	j.APIServer.Version = k8sVersion
	j.APIServer.CAFile = l.pki.caCert
	j.VCenter.URL = l.vc.url
	j.VCenter.Username = l.secrets.VCUser
	j.VCenter.Password = l.secrets.VCPass
	s1, s256, err := thumbprints(l.pki.vcsimCert)
	if err != nil {
		return err
	}
	j.VCenter.ThumbprintSHA1 = s1
	j.VCenter.ThumbprintSHA256 = s256
	j.VCenter.Datacenter = vcDatacenter
	j.VCenter.Datastore = vcDatastore
	j.VCenter.DatastoreDir = l.vc.dsDir
	j.VCenter.Inventory = filepath.Join(l.dir, "inventory.json")
	j.S3.Endpoint = l.s3URL
	j.S3.Region = "us-east-1"
	j.S3.Bucket = s3Bucket
	j.S3.AccessKey = l.secrets.AccessKey
	j.S3.SecretKey = l.secrets.SecretKey
	j.S3.DataDir = filepath.Join(l.dir, "s3")
	b, _ := json.MarshalIndent(j, "", "  ")
	return writeFileAtomic(filepath.Join(l.dir, "lab.json"), append(b, '\n'), 0o644)
}

func (l *lab) stop() {
	l.stopOnce.Do(func() {
		var wg sync.WaitGroup
		for _, c := range l.children {
			wg.Add(1)
			go func(c *child) { defer wg.Done(); c.stop(20 * time.Second) }(c)
		}
		wg.Wait()
		if l.vc != nil {
			l.vc.close()
		}
		if l.etcd != nil {
			l.etcd.Close()
		}
		_ = os.Remove(filepath.Join(l.dir, "lab.json"))
		if l.lockFile != nil {
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

var errStopped = errors.New("stopped")

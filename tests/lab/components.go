package main

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	etcdembed "go.etcd.io/etcd/server/v3/embed"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// components is the lab: every part it runs, in the order their lab.json entries appear. Adding
// a part means adding an entry here (and its start function, probe and entry below); lab.go
// allocates its ports, starts it after what it needs, waits for its probe, writes its lab.json
// entry and stops it.
func (l *lab) components() []*component {
	comps := l.baseComponents()
	if l.kubevirt {
		// KubeVirt's virt-api and virt-controller (kubevirt.go), right after the CRDs.
		i := slices.IndexFunc(comps, func(c *component) bool { return c.name == "crds" })
		comps = slices.Insert(comps, i+1, l.kubevirtComponents()...)
	}
	return comps
}

// baseComponents is the lab without --kubevirt.
func (l *lab) baseComponents() []*component {
	return []*component{{
		name:  "kubeconfig", // DIR/kubeconfig: the admin identity, for users of the lab
		start: l.kubeconfigWrite,
		json:  "kubeconfig",
		info:  func() (any, error) { return l.kubeconfigPath(), nil },
	}, {
		name:  "etcd",
		ports: []string{"etcdClient", "etcdPeer"},
		start: l.etcdStart,
		ready: probe{what: "serving", timeout: time.Minute, every: 100 * time.Millisecond, check: l.etcdReady},
	}, {
		name:  "apiserver",
		ports: []string{"apiserver"},
		needs: []string{"etcd"},
		start: l.apiserverStart,
		ready: probe{what: "/readyz ok", timeout: 5 * time.Minute, every: 300 * time.Millisecond, check: l.apiserverReady},
		json:  "apiserver",
		info:  l.apiserverInfo,
		url:   l.apiURL,
	}, {
		name:  "controller-manager",
		needs: []string{"apiserver"},
		start: l.controllerManagerStart,
		ready: probe{what: "namespace default and ServiceAccount default/default exist", timeout: 3 * time.Minute,
			every: 300 * time.Millisecond, check: l.controllerManagerReady},
	}, {
		name:  "crds",
		needs: []string{"apiserver"},
		start: l.crdsApply,
		ready: probe{what: "CRDs Established", timeout: time.Minute, every: 200 * time.Millisecond, check: l.crdsEstablished},
		log:   "apiserver.log",
	}, {
		name:  "vcsim",
		ports: []string{"vcsim"},
		start: l.vcsimStart,
		ready: probe{what: "SOAP answers", timeout: time.Minute, every: 200 * time.Millisecond, check: l.vcsimReady},
		json:  "vcenter",
		info:  l.vcenterInfo,
		url:   func() string { return l.vc.url },
	}, {
		name:  "s3",
		ports: []string{"s3"},
		start: l.s3Start,
		ready: probe{what: "signed HEAD /" + s3Bucket + " ok", timeout: time.Minute, every: 200 * time.Millisecond, check: l.s3Ready},
		json:  "s3",
		info:  l.s3Info,
		url:   l.s3URL,
	}, {
		// A second vCenter whose certificate a private CA signed (the usual corporate set-up):
		// clients trust it with the CA bundle, not a thumbprint.
		name:  "vcsim-ca",
		ports: []string{"vcsimCA"},
		start: l.vcsimCAStart,
		ready: probe{what: "SOAP answers, certificate verified with the lab's endpoint CA", timeout: time.Minute,
			every: 200 * time.Millisecond, check: l.vcsimCAReady},
		json: "vcenterCa",
		info: l.vcenterCAInfo,
		url:  func() string { return l.vcCA.url },
		log:  "vcsim.log",
	}, {
		// S3 over https with a certificate of the same private CA: a TLS front of the lab's S3.
		name:  "s3-tls",
		ports: []string{"s3tls"},
		needs: []string{"s3"},
		start: l.s3TLSStart,
		ready: probe{what: "signed HEAD /" + s3Bucket + " over https ok", timeout: time.Minute,
			every: 200 * time.Millisecond, check: l.s3TLSReady},
		json: "s3Tls",
		info: l.s3TLSInfo,
		url:  l.s3TLSURL,
		log:  "s3.log",
	}}
}

// componentState is what the components' start functions keep for their probes, lab.json
// entries and each other.
type componentState struct {
	etcd     *etcdembed.Etcd
	apiHTTP  *http.Client         // admin client certificate, for /readyz
	kube     kubernetes.Interface // admin
	apiext   apiextclient.Interface
	crdNames []string
	vc       *vcsimLab
	vcCA     *vcsimLab    // the CA-signed vcsim
	s3TLS    *http.Server // the https front of S3
	kv       kubevirtState
}

//go:embed crds/*.yaml
var crdFS embed.FS

const defaultControllers = "garbage-collector-controller,namespace-controller,serviceaccount-controller," +
	"serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller," +
	// ResourceQuota status (hard and used), which quota admission and ferry's preflight read.
	"resourcequota-controller"

const s3Bucket = "ferry-staging"

// defaultContext names the cluster and context of DIR/kubeconfig unless --context says otherwise
// (a second lab takes another name, so that KUBECONFIG=a:b shows two contexts).
const defaultContext = "ferry-lab"

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// newChild prepares a supervised child process logging to DIR/logs/NAME.log.
func (l *lab) newChild(name, path string, args []string, stopSig syscall.Signal) *child {
	return &child{
		name: name, path: path, args: args, env: slices.Clone(l.env),
		logPath: filepath.Join(l.logDir, name+".log"), stopSig: stopSig,
		onDeath: func(err error) {
			select {
			case l.fatal <- err:
			default:
			}
		},
	}
}

// runChild starts c; stopping it sends its stop signal, then SIGKILL after 20 s.
func runChild(c *child) (func(), error) {
	if err := c.run(); err != nil {
		return nil, err
	}
	return func() { c.stop(20 * time.Second) }, nil
}

func (l *lab) self() string {
	exe, _ := os.Executable()
	return exe
}

// ---------- kubeconfig ----------

func (l *lab) kubeconfigPath() string { return filepath.Join(l.dir, "kubeconfig") }

func (l *lab) kubeconfigWrite(context.Context) (func(), error) {
	return nil, writeKubeconfig(l.kubeconfigPath(), cmp.Or(l.context, defaultContext), l.apiURL(), l.pki.caCert, l.pki.adminCert, l.pki.adminKey,
		cmp.Or(l.context, defaultContext)+"-admin")
}

// ---------- etcd ----------

func (l *lab) etcdStart(context.Context) (func(), error) {
	progress("etcd: starting on 127.0.0.1:%d (data %s)", l.port("etcdClient"), filepath.Join(l.dir, "etcd"))
	e, err := startEtcd(l.dir, l.port("etcdClient"), l.port("etcdPeer"), filepath.Join(l.logDir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	l.etcd = e
	return e.Close, nil
}

func (l *lab) etcdReady(context.Context) error {
	select {
	case <-l.etcd.Server.ReadyNotify():
		return nil
	case err := <-l.etcd.Err():
		return failed{cmp.Or(err, errors.New("etcd stopped"))}
	default:
		return errors.New("not serving yet")
	}
}

// ---------- kube-apiserver ----------

func (l *lab) apiURL() string { return fmt.Sprintf("https://127.0.0.1:%d", l.port("apiserver")) }

func (l *lab) apiserverStart(context.Context) (func(), error) {
	p := l.pki
	args := []string{
		"--etcd-servers=" + fmt.Sprintf("http://127.0.0.1:%d", l.port("etcdClient")),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.port("apiserver")),
		"--cert-dir=" + filepath.Join(p.dir, "apiserver-generated"),
		"--tls-cert-file=" + p.servingCert,
		"--tls-private-key-file=" + p.servingKey,
		"--client-ca-file=" + p.caCert,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + l.apiURL(),
		"--service-account-key-file=" + p.saPub,
		"--service-account-signing-key-file=" + p.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--requestheader-client-ca-file=" + p.frontCACert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.frontClientCert,
		"--proxy-client-key-file=" + p.frontKey,
		// pods/log (and exec, attach, port-forward) go to the pod's node's kubelet, which
		// ferry-sim serves: the apiserver authenticates with a client certificate of the cluster
		// CA (CIS 1.2.4), and dials the Node's InternalIP, 127.0.0.1 here (the default order
		// starts with Hostname, which names no resolvable host in the lab). No
		// --kubelet-certificate-authority: a kubelet without serverTLSBootstrap serves a
		// self-signed certificate, which the apiserver then does not verify (kubeadm's default;
		// CIS 1.2.5 left out).
		"--kubelet-client-certificate=" + p.kubeletClientCert,
		"--kubelet-client-key=" + p.kubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--profiling=false",
		// Stop in seconds: the HTTP server's shutdown waits 2 s (not --request-timeout, 60 s) for
		// connections still open, which are open watches only once the in-flight requests drained
		// (answered 429 with Retry-After meanwhile). Without it a stop or restart took 20 s.
		"--shutdown-send-retry-after=true",
		// Every write, as the apiserver saw it (who, impersonating whom, what, when): how a test
		// proves from the apiserver's side that a fenced controller wrote nothing (auditWrites).
		"--audit-policy-file=" + auditPolicyPath(l.dir),
		"--audit-log-path=" + l.auditLogPath(),
		"--audit-log-format=json",
		"--audit-log-maxsize=200",
		"--audit-log-maxbackup=1",
		// What a hardened distribution enables besides the defaults (see admission.go).
		"--enable-admission-plugins=" + strings.Join(hardenedAdmissionPlugins, ","),
		"--admission-control-config-file=" + admissionConfigPath(l.dir),
		// 127.0.0.1 cannot be published in the kubernetes Service endpoints
		"--endpoint-reconciler-type=none",
		"--v=1",
	}
	if err := writeAuditPolicy(l.dir); err != nil {
		return nil, err
	}
	if err := writeAdmissionConfig(l.dir); err != nil {
		return nil, err
	}
	// The lab's own clients, for the probes of the apiserver and what runs on it.
	var err error
	if l.apiHTTP, err = l.httpsClient(); err != nil {
		return nil, err
	}
	cfg := l.restConfig()
	if l.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if l.apiext, err = apiextclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	c := l.newChild("apiserver", l.self(), append([]string{"internal-apiserver"}, args...), syscall.SIGTERM)
	progress("apiserver: kube-apiserver %s starting on %s (child process, log %s)", k8sVersion, l.apiURL(), c.logPath)
	return runChild(c)
}

// restConfig is the admin identity of the kubeconfig, with the lab's own rate limits.
func (l *lab) restConfig() *rest.Config {
	return &rest.Config{
		Host: l.apiURL(),
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: l.pki.caCert, CertFile: l.pki.adminCert, KeyFile: l.pki.adminKey,
		},
		QPS: 50, Burst: 100, Timeout: 15 * time.Second,
	}
}

func (l *lab) httpsClient() (*http.Client, error) {
	ca, err := os.ReadFile(l.pki.caCert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(l.pki.adminCert, l.pki.adminKey)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}, nil
}

func (l *lab) apiserverReady(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.apiURL()+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := l.apiHTTP.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

type apiserverInfo struct {
	URL      string `json:"url"`
	Version  string `json:"version"`
	CAFile   string `json:"caFile"`
	AuditLog string `json:"auditLog"`
}

func (l *lab) apiserverInfo() (any, error) {
	return apiserverInfo{URL: l.apiURL(), Version: k8sVersion, CAFile: l.pki.caCert, AuditLog: l.auditLogPath()}, nil
}

// auditLogPath is the apiserver's audit log (see auditPolicy): every request of a ServiceAccount
// and every write: for the RBAC proofs (what a component with a ServiceAccount token did) and fencing.
func (l *lab) auditLogPath() string { return filepath.Join(l.logDir, "audit.log") }

// ---------- kube-controller-manager ----------

func (l *lab) controllerManagerStart(context.Context) (func(), error) {
	p := l.pki
	kubeconfig := filepath.Join(p.dir, "controller-manager.kubeconfig")
	if err := writeKubeconfig(kubeconfig, defaultContext, l.apiURL(), p.caCert, p.kcmCert, p.kcmKey, "system:kube-controller-manager"); err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + l.controllers,
		"--service-account-private-key-file=" + p.saKey,
		"--root-ca-file=" + p.caCert,
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--v=1",
	}
	c := l.newChild("controller-manager", l.self(), append([]string{"internal-controller-manager"}, args...), syscall.SIGTERM)
	progress("controller-manager: kube-controller-manager starting (child process, controllers %s, log %s)", l.controllers, c.logPath)
	return runChild(c)
}

// controllerManagerReady: the ServiceAccount controller has created default/default, proof that
// the controller-manager is up and talking to the apiserver.
func (l *lab) controllerManagerReady(ctx context.Context) error {
	if _, err := l.kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return err
	}
	_, err := l.kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
	return err
}

// ---------- CRDs ----------

// crdsApply creates or updates the CRDs of crds/*.yaml; with --kubevirt, those of KubeVirt's
// groups are left to KubeVirt's own (the kubevirt component applies them).
func (l *lab) crdsApply(ctx context.Context) (func(), error) {
	if !l.kubevirt {
		if err := l.kubevirtRemoveWebhooks(ctx); err != nil {
			return nil, err
		}
	}
	files, err := fs.Glob(crdFS, "crds/*.yaml")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := crdFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var crd apiextv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict([]byte(doc), &crd); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if crd.Name == "" || (l.kubevirt && kubevirtOwns(&crd)) {
				continue
			}
			l.crdNames = append(l.crdNames, crd.Name)
			for attempt := 0; ; attempt++ {
				err = applyCRD(ctx, l.apiext, &crd)
				if err == nil || attempt >= 5 {
					break
				}
				time.Sleep(time.Second)
			}
			if err != nil {
				return nil, fmt.Errorf("CRD %s: %w", crd.Name, err)
			}
		}
	}
	progress("crds: applied %s", strings.Join(l.crdNames, ", "))
	return nil, nil
}

func (l *lab) crdsEstablished(ctx context.Context) error {
	for _, n := range l.crdNames {
		crd, err := l.apiext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !established(crd) {
			return fmt.Errorf("CRD %s not Established", n)
		}
	}
	return nil
}

func applyCRD(ctx context.Context, cs apiextclient.Interface, crd *apiextv1.CustomResourceDefinition) error {
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	cur, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, crd, metav1.CreateOptions{FieldManager: "ferry-lab"})
		return err
	}
	if err != nil {
		return err
	}
	upd := crd.DeepCopy()
	upd.ResourceVersion = cur.ResourceVersion
	_, err = api.Update(ctx, upd, metav1.UpdateOptions{FieldManager: "ferry-lab"})
	return err
}

func established(crd *apiextv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
			return true
		}
	}
	return false
}

// ---------- vcsim ----------

func (l *lab) vcsimStart(ctx context.Context) (func(), error) {
	progress("vcsim: creating VPX inventory with %d VMs", l.vms)
	if f, err := os.OpenFile(filepath.Join(l.logDir, "vcsim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		log.SetOutput(f) // vcsim logs through the standard logger
	}
	vc, err := startVcsim(ctx, filepath.Join(l.dir, "vcsim"), l.port("vcsim"), l.vms, l.secrets.VCUser, l.secrets.VCPass,
		l.pki.vcsimCert, l.pki.vcsimKey)
	if err != nil {
		return nil, err
	}
	l.vc = vc
	if err := vc.writeInventory(ctx, l.inventoryPath()); err != nil {
		return vc.close, fmt.Errorf("inventory: %w", err)
	}
	progress("vcsim: %d VMs at %s, datastore %s", vc.vmCount, vc.url, vc.dsDir)
	return vc.close, nil
}

func (l *lab) inventoryPath() string { return filepath.Join(l.dir, "inventory.json") }

func (l *lab) vcsimReady(ctx context.Context) error { return vcsimAnswers(ctx, l.vc.url) }

type vcenterInfo struct {
	URL              string `json:"url"`
	Username         string `json:"username"`
	Password         string `json:"password"`
	ThumbprintSHA1   string `json:"thumbprintSha1"`
	ThumbprintSHA256 string `json:"thumbprintSha256"`
	Datacenter       string `json:"datacenter"`
	Datastore        string `json:"datastore"`
	DatastoreDir     string `json:"datastoreDir"`
	Inventory        string `json:"inventory"`
}

func (l *lab) vcenterInfo() (any, error) {
	s1, s256, err := thumbprints(l.pki.vcsimCert)
	if err != nil {
		return nil, err
	}
	return vcenterInfo{
		URL: l.vc.url, Username: l.secrets.VCUser, Password: l.secrets.VCPass,
		ThumbprintSHA1: s1, ThumbprintSHA256: s256,
		Datacenter: vcDatacenter, Datastore: vcDatastore, DatastoreDir: l.vc.dsDir,
		Inventory: l.inventoryPath(),
	}, nil
}

// ---------- vcsim-ca ----------

func (l *lab) vcsimCAStart(ctx context.Context) (func(), error) {
	// One VM per test that runs against the CA-signed vCenter (Env::new_ca and the tag tests
	// claim 4 today), with room for more.
	const vms = 8
	progress("vcsim-ca: creating a second VPX inventory with %d VMs, CA-signed certificate", vms)
	vc, err := startVcsim(ctx, filepath.Join(l.dir, "vcsim-ca"), l.port("vcsimCA"), vms, l.secrets.VCUser, l.secrets.VCPass,
		l.pki.vcsimCACert, l.pki.vcsimCAKey)
	if err != nil {
		return nil, err
	}
	l.vcCA = vc
	if err := vc.writeInventory(ctx, l.inventoryCAPath()); err != nil {
		return vc.close, fmt.Errorf("inventory: %w", err)
	}
	progress("vcsim-ca: %d VMs at %s, datastore %s", vc.vmCount, vc.url, vc.dsDir)
	return vc.close, nil
}

func (l *lab) inventoryCAPath() string { return filepath.Join(l.dir, "inventory-ca.json") }

// endpointCAClient trusts exactly the lab's endpoint CA: the probes of the CA-signed endpoints
// check their certificates the way a client with the bundle does.
func (l *lab) endpointCAClient() (*http.Client, error) {
	ca, err := os.ReadFile(l.pki.endpointCACert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("no certificate in " + l.pki.endpointCACert)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}, nil
}

func (l *lab) vcsimCAReady(ctx context.Context) error {
	cl, err := l.endpointCAClient()
	if err != nil {
		return failed{err}
	}
	return soapAnswers(ctx, cl, l.vcCA.url)
}

type vcenterCAInfo struct {
	URL              string `json:"url"`
	Username         string `json:"username"`
	Password         string `json:"password"`
	CAFile           string `json:"caFile"`
	ThumbprintSHA256 string `json:"thumbprintSha256"`
	DatastoreDir     string `json:"datastoreDir"`
	Inventory        string `json:"inventory"`
}

func (l *lab) vcenterCAInfo() (any, error) {
	_, s256, err := thumbprints(l.pki.vcsimCACert)
	if err != nil {
		return nil, err
	}
	return vcenterCAInfo{
		URL: l.vcCA.url, Username: l.secrets.VCUser, Password: l.secrets.VCPass,
		CAFile: l.pki.endpointCACert, ThumbprintSHA256: s256, DatastoreDir: l.vcCA.dsDir,
		Inventory: l.inventoryCAPath(),
	}, nil
}

// ---------- s3-tls ----------

func (l *lab) s3TLSURL() string { return fmt.Sprintf("https://127.0.0.1:%d", l.port("s3tls")) }

// s3TLSStart serves https on its port and passes every request, Host header and all (SigV4
// signs it), to the lab's S3.
func (l *lab) s3TLSStart(context.Context) (func(), error) {
	cert, err := tls.LoadX509KeyPair(l.pki.s3TLSCert, l.pki.s3TLSKey)
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(l.s3URL())
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", l.port("s3tls")))
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler:           httputil.NewSingleHostReverseProxy(target),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	l.s3TLS = srv
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	progress("s3-tls: https front of %s on %s (CA %s)", l.s3URL(), l.s3TLSURL(), l.pki.endpointCACert)
	return func() { _ = srv.Close() }, nil
}

func (l *lab) s3TLSReady(ctx context.Context) error {
	cl, err := l.endpointCAClient()
	if err != nil {
		return failed{err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, l.s3TLSURL()+"/"+s3Bucket, nil)
	if err != nil {
		return err
	}
	signV4(req, l.secrets.AccessKey, l.secrets.SecretKey, "us-east-1", nil)
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

type s3TLSInfo struct {
	Endpoint string `json:"endpoint"`
	CAFile   string `json:"caFile"`
}

func (l *lab) s3TLSInfo() (any, error) {
	return s3TLSInfo{Endpoint: l.s3TLSURL(), CAFile: l.pki.endpointCACert}, nil
}

// ---------- S3 (ferry-lab-s3, tests/s3) ----------

func (l *lab) findHelper(name, envVar string) (string, error) {
	if p := os.Getenv(envVar); p != "" {
		return p, nil
	}
	p := filepath.Join(l.binDir, name)
	if exists(p) {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found next to %s (nor $%s, nor PATH); build it with tests/lab/build.sh", name, l.binDir, envVar)
}

func (l *lab) s3URL() string { return fmt.Sprintf("http://127.0.0.1:%d", l.port("s3")) }

func (l *lab) s3DataDir() string { return filepath.Join(l.dir, "s3") }

func (l *lab) s3Start(context.Context) (func(), error) {
	bin, err := l.findHelper("ferry-lab-s3", "FERRY_LAB_S3")
	if err != nil {
		return nil, err
	}
	data := l.s3DataDir()
	// For the lab's S3 a bucket is a directory under its root.
	if err := os.MkdirAll(filepath.Join(data, s3Bucket), 0o755); err != nil {
		return nil, err
	}
	args := []string{
		"--host", "127.0.0.1",
		"--port", strconv.Itoa(l.port("s3")),
		"--access-key", l.secrets.AccessKey,
		"--secret-key", l.secrets.SecretKey,
		data,
	}
	c := l.newChild("s3", bin, args, syscall.SIGINT)
	c.env = append(c.env, "RUST_LOG=info", "NO_COLOR=1")
	progress("s3: ferry-lab-s3 starting on %s (bucket %s, data %s, log %s)", l.s3URL(), s3Bucket, data, c.logPath)
	return runChild(c)
}

func (l *lab) s3Ready(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, l.s3URL()+"/"+s3Bucket, nil)
	if err != nil {
		return err
	}
	signV4(req, l.secrets.AccessKey, l.secrets.SecretKey, "us-east-1", nil)
	resp, err := s3ProbeClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

var s3ProbeClient = &http.Client{Timeout: 5 * time.Second}

type s3Info struct {
	Endpoint  string `json:"endpoint"`
	Region    string `json:"region"`
	Bucket    string `json:"bucket"`
	AccessKey string `json:"accessKey"`
	SecretKey string `json:"secretKey"`
	DataDir   string `json:"dataDir"`
}

func (l *lab) s3Info() (any, error) {
	return s3Info{
		Endpoint: l.s3URL(), Region: "us-east-1", Bucket: s3Bucket,
		AccessKey: l.secrets.AccessKey, SecretKey: l.secrets.SecretKey, DataDir: l.s3DataDir(),
	}, nil
}

// signV4 signs a request with AWS Signature Version 4 (service s3), for the readiness probe.
func signV4(req *http.Request, ak, sk, region string, body []byte) {
	now := time.Now().UTC()
	amzDate := now.Format("20060102T150405Z")
	day := now.Format("20060102")
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	req.Header.Set("x-amz-date", amzDate)
	req.Header.Set("x-amz-content-sha256", payload)
	host := req.URL.Host
	signed := "host;x-amz-content-sha256;x-amz-date"
	canonHeaders := "host:" + host + "\n" + "x-amz-content-sha256:" + payload + "\n" + "x-amz-date:" + amzDate + "\n"
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	canon := strings.Join([]string{req.Method, path, req.URL.RawQuery, canonHeaders, signed, payload}, "\n")
	ch := sha256.Sum256([]byte(canon))
	scope := day + "/" + region + "/s3/aws4_request"
	sts := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(ch[:])
	mac := func(k []byte, s string) []byte { h := hmac.New(sha256.New, k); h.Write([]byte(s)); return h.Sum(nil) }
	kd := mac([]byte("AWS4"+sk), day)
	kd = mac(kd, region)
	kd = mac(kd, "s3")
	kd = mac(kd, "aws4_request")
	sig := hex.EncodeToString(mac(kd, sts))
	req.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s", ak, scope, signed, sig))
}

package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

//go:embed crds/*.yaml
var crdFS embed.FS

const defaultControllers = "garbage-collector-controller,namespace-controller,serviceaccount-controller," +
	"serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller"

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func (l *lab) newChild(name, path string, args []string, stopSig syscall.Signal) *child {
	c := &child{
		name: name, path: path, args: args, env: os.Environ(),
		logPath: filepath.Join(l.logDir, name+".log"), stopSig: stopSig,
		onDeath: func(err error) {
			select {
			case l.fatal <- err:
			default:
			}
		},
	}
	l.children = append(l.children, c)
	return c
}

func (l *lab) self() string {
	exe, _ := os.Executable()
	return exe
}

// ---------- kube-apiserver ----------

func (l *lab) startAPIServer() {
	p := l.pki
	args := []string{
		"--etcd-servers=" + fmt.Sprintf("http://127.0.0.1:%d", l.ports.EtcdClient),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.ports.APIServer),
		"--cert-dir=" + filepath.Join(p.dir, "apiserver-generated"),
		"--tls-cert-file=" + p.servingCert,
		"--tls-private-key-file=" + p.servingKey,
		"--client-ca-file=" + p.caCert,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + l.apiURL,
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
		"--profiling=false",
		// 127.0.0.1 cannot be published in the kubernetes Service endpoints
		"--endpoint-reconciler-type=none",
		"--v=1",
	}
	c := l.newChild("apiserver", l.self(), append([]string{"internal-apiserver"}, args...), syscall.SIGTERM)
	progress("kube-apiserver %s: starting on %s (child process, log %s)", k8sVersion, l.apiURL, c.logPath)
	if err := c.run(); err != nil {
		l.fatal <- err
	}
}

func (l *lab) restConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(l.dir, "kubeconfig"))
	if err != nil {
		return nil, err
	}
	cfg.QPS = 50
	cfg.Burst = 100
	cfg.Timeout = 15 * time.Second
	return cfg, nil
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

func (l *lab) waitAPIServer(ctx context.Context) error {
	hc, err := l.httpsClient()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Minute)
	last := ""
	for {
		resp, err := hc.Get(l.apiURL + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				progress("kube-apiserver: /readyz ok")
				return nil
			}
			last = fmt.Sprintf("/readyz %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after 5m (%s); log tail:\n%s", last, tail(filepath.Join(l.logDir, "apiserver.log"), 30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-l.fatal:
			return err
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// ---------- kube-controller-manager ----------

func (l *lab) startControllerManager() {
	p := l.pki
	args := []string{
		"--kubeconfig=" + filepath.Join(p.dir, "controller-manager.kubeconfig"),
		"--controllers=" + l.controllers,
		"--service-account-private-key-file=" + p.saKey,
		"--root-ca-file=" + p.caCert,
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--v=1",
	}
	c := l.newChild("controller-manager", l.self(), append([]string{"internal-controller-manager"}, args...), syscall.SIGTERM)
	progress("kube-controller-manager: starting (child process, controllers %s, log %s)", l.controllers, c.logPath)
	if err := c.run(); err != nil {
		l.fatal <- err
	}
}

// waitControllerManager waits for the ServiceAccount controller to create default/default: proof
// that the controller-manager is up and talking to the apiserver.
func (l *lab) waitControllerManager(ctx context.Context) error {
	cfg, err := l.restConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Minute)
	nsOK := false
	for {
		if !nsOK {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
				nsOK = true
			}
		}
		if nsOK {
			if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err == nil {
				progress("kube-controller-manager: ready (namespace default and ServiceAccount default/default exist)")
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ServiceAccount default/default not created within 3m; controller-manager log tail:\n%s",
				tail(filepath.Join(l.logDir, "controller-manager.log"), 30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-l.fatal:
			return err
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// ---------- CRDs ----------

func (l *lab) installCRDs(ctx context.Context) error {
	cfg, err := l.restConfig()
	if err != nil {
		return err
	}
	cs, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := fs.Glob(crdFS, "crds/*.yaml")
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		b, err := crdFS.ReadFile(f)
		if err != nil {
			return err
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var crd apiextv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict([]byte(doc), &crd); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if crd.Name == "" {
				continue
			}
			names = append(names, crd.Name)
			for attempt := 0; ; attempt++ {
				err = applyCRD(ctx, cs, &crd)
				if err == nil || attempt >= 5 {
					break
				}
				time.Sleep(time.Second)
			}
			if err != nil {
				return fmt.Errorf("CRD %s: %w", crd.Name, err)
			}
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, n := range names {
		for {
			crd, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, n, metav1.GetOptions{})
			if err == nil && established(crd) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not Established within 1m (%v)", n, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	progress("CRDs established: %s", strings.Join(names, ", "))
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

// ---------- S3 (s3s-fs) ----------

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

func (l *lab) startS3() error {
	bin, err := l.findHelper("s3s-fs", "FERRY_LAB_S3S_FS")
	if err != nil {
		return err
	}
	data := filepath.Join(l.dir, "s3")
	// For s3s-fs a bucket is a directory under its root.
	if err := os.MkdirAll(filepath.Join(data, s3Bucket), 0o755); err != nil {
		return err
	}
	args := []string{
		"--host", "127.0.0.1",
		"--port", strconv.Itoa(l.ports.S3),
		"--access-key", l.secrets.AccessKey,
		"--secret-key", l.secrets.SecretKey,
		data,
	}
	c := l.newChild("s3s-fs", bin, args, syscall.SIGINT)
	c.env = append(c.env, "RUST_LOG=info", "NO_COLOR=1")
	progress("s3s-fs: starting on %s (bucket %s, data %s, log %s)", l.s3URL, s3Bucket, data, c.logPath)
	return c.run()
}

func (l *lab) waitS3(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	hc := &http.Client{Timeout: 5 * time.Second}
	last := ""
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodHead, l.s3URL+"/"+s3Bucket, nil)
		signV4(req, l.secrets.AccessKey, l.secrets.SecretKey, "us-east-1", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				progress("s3s-fs: ready, signed HEAD /%s ok", s3Bucket)
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("S3 not answering within 1m (%s); log tail:\n%s", last, tail(filepath.Join(l.logDir, "s3s-fs.log"), 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-l.fatal:
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
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

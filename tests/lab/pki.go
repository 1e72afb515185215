package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// pki holds the paths of every certificate and key the lab uses. All of them are generated once
// into DIR/pki and reused on every later start, so URLs, CA and thumbprints stay stable.
type pki struct {
	dir string

	caCert, caKey             string
	servingCert, servingKey   string // kube-apiserver serving cert (127.0.0.1, localhost, kubernetes.default...)
	adminCert, adminKey       string // CN=ferry-lab-admin, O=system:masters
	kcmCert, kcmKey           string // CN=system:kube-controller-manager, O=system:masters
	saKey, saPub              string // ServiceAccount token signing key (RSA)
	frontCACert, frontCAKey   string // front-proxy (requestheader) CA
	frontClientCert, frontKey string // front-proxy client (aggregator -> extension apiservers)
	// The apiserver's client certificate towards kubelets (--kubelet-client-certificate):
	// pods/log, exec, port-forward and nodes/proxy go to the node's kubelet with it.
	kubeletClientCert, kubeletClientKey string
	vcsimCert, vcsimKey                 string // vcsim TLS cert (self-signed, 127.0.0.1/localhost)
	// A private CA for the lab's CA-signed endpoints (a vCenter with a corporate certificate,
	// S3 over https), and the serving certificates it signs.
	endpointCACert, endpointCAKey string
	vcsimCACert, vcsimCAKey       string // the second vcsim, CA-signed (127.0.0.1/localhost)
	s3TLSCert, s3TLSKey           string // the https front of S3, CA-signed (127.0.0.1/localhost)
}

func newPKI(dir string) *pki {
	p := func(n string) string { return filepath.Join(dir, n) }
	return &pki{
		dir:    dir,
		caCert: p("ca.crt"), caKey: p("ca.key"),
		servingCert: p("apiserver.crt"), servingKey: p("apiserver.key"),
		adminCert: p("admin.crt"), adminKey: p("admin.key"),
		kcmCert: p("controller-manager.crt"), kcmKey: p("controller-manager.key"),
		saKey: p("sa.key"), saPub: p("sa.pub"),
		frontCACert: p("front-proxy-ca.crt"), frontCAKey: p("front-proxy-ca.key"),
		frontClientCert: p("front-proxy-client.crt"), frontKey: p("front-proxy-client.key"),
		kubeletClientCert: p("apiserver-kubelet-client.crt"), kubeletClientKey: p("apiserver-kubelet-client.key"),
		vcsimCert: p("vcsim.crt"), vcsimKey: p("vcsim.key"),
		endpointCACert: p("endpoint-ca.crt"), endpointCAKey: p("endpoint-ca.key"),
		vcsimCACert: p("vcsim-ca.crt"), vcsimCAKey: p("vcsim-ca.key"),
		s3TLSCert: p("s3-tls.crt"), s3TLSKey: p("s3-tls.key"),
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// ensure creates whatever is missing. Existing files are never touched.
func (k *pki) ensure() error {
	if err := os.MkdirAll(k.dir, 0o700); err != nil {
		return err
	}
	const validity = 10 * 365 * 24 * time.Hour
	ca, caKey, err := k.ensureCA(k.caCert, k.caKey, "ferry-lab-ca")
	if err != nil {
		return err
	}
	if err := k.ensureLeaf(k.servingCert, k.servingKey, ca, caKey, pkix.Name{CommonName: "kube-apiserver"},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.0.0.1")},
		x509.ExtKeyUsageServerAuth, validity); err != nil {
		return err
	}
	if err := k.ensureLeaf(k.adminCert, k.adminKey, ca, caKey,
		pkix.Name{CommonName: "ferry-lab-admin", Organization: []string{"system:masters"}}, nil, nil,
		x509.ExtKeyUsageClientAuth, validity); err != nil {
		return err
	}
	if err := k.ensureLeaf(k.kcmCert, k.kcmKey, ca, caKey,
		pkix.Name{CommonName: "system:kube-controller-manager", Organization: []string{"system:masters"}}, nil, nil,
		x509.ExtKeyUsageClientAuth, validity); err != nil {
		return err
	}
	// kubeadm's apiserver-kubelet-client (cmd/kubeadm/app/phases/certs/certlist.go): signed by
	// the cluster CA, which kubelets trust as their client CA, in the group a kubelet's
	// SubjectAccessReview lets through (system:masters). Created on a lab's next start too.
	if err := k.ensureLeaf(k.kubeletClientCert, k.kubeletClientKey, ca, caKey,
		pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}}, nil, nil,
		x509.ExtKeyUsageClientAuth, validity); err != nil {
		return err
	}
	fca, fcaKey, err := k.ensureCA(k.frontCACert, k.frontCAKey, "ferry-lab-front-proxy-ca")
	if err != nil {
		return err
	}
	if err := k.ensureLeaf(k.frontClientCert, k.frontKey, fca, fcaKey, pkix.Name{CommonName: "front-proxy-client"}, nil, nil,
		x509.ExtKeyUsageClientAuth, validity); err != nil {
		return err
	}
	if !exists(k.saKey) || !exists(k.saPub) {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return err
		}
		pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			return err
		}
		if err := writePEM(k.saKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), 0o600); err != nil {
			return err
		}
		if err := writePEM(k.saPub, "PUBLIC KEY", pub, 0o644); err != nil {
			return err
		}
	}
	eca, ecaKey, err := k.ensureCA(k.endpointCACert, k.endpointCAKey, "ferry-lab-endpoint-ca")
	if err != nil {
		return err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	for _, leaf := range []struct{ cert, key, cn string }{
		{k.vcsimCACert, k.vcsimCAKey, "ferry-lab vcsim (CA-signed)"},
		{k.s3TLSCert, k.s3TLSKey, "ferry-lab s3 (https)"},
	} {
		if err := k.ensureLeaf(leaf.cert, leaf.key, eca, ecaKey, pkix.Name{CommonName: leaf.cn},
			[]string{"localhost"}, loopback, x509.ExtKeyUsageServerAuth, validity); err != nil {
			return err
		}
	}
	// vcsim: a self-signed certificate (like an ESXi/vCenter default install); clients pin its thumbprint.
	if !exists(k.vcsimCert) || !exists(k.vcsimKey) {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber:          randSerial(),
			Subject:               pkix.Name{CommonName: "127.0.0.1", Organization: []string{"ferry-lab vcsim"}},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(validity),
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			BasicConstraintsValid: true,
			IsCA:                  true,
			DNSNames:              []string{"localhost"},
			IPAddresses:           []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return err
		}
		if err := writePEM(k.vcsimKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), 0o600); err != nil {
			return err
		}
		if err := writePEM(k.vcsimCert, "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func randSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (k *pki) ensureCA(certPath, keyPath, cn string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	if exists(certPath) && exists(keyPath) {
		return loadCertKey(certPath, keyPath)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randSerial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(20 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(keyPath, "EC PRIVATE KEY", kder, 0o600); err != nil {
		return nil, nil, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func (k *pki) ensureLeaf(certPath, keyPath string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, subj pkix.Name,
	dns []string, ips []net.IP, usage x509.ExtKeyUsage, validity time.Duration) error {
	if exists(certPath) && exists(keyPath) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(),
		Subject:      subj,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(keyPath, "EC PRIVATE KEY", kder, 0o600); err != nil {
		return err
	}
	return writePEM(certPath, "CERTIFICATE", der, 0o644)
}

func loadCertKey(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, nil, errors.New("bad PEM in " + certPath + " or " + keyPath)
	}
	cert, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// thumbprints returns the colon-separated upper-case SHA-1 and SHA-256 fingerprints of the first
// certificate in a PEM file (the format govc and vSphere clients use).
func thumbprints(certPath string) (string, string, error) {
	b, err := os.ReadFile(certPath)
	if err != nil {
		return "", "", err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "", "", fmt.Errorf("no PEM in %s", certPath)
	}
	s1 := sha1.Sum(blk.Bytes)
	s256 := sha256.Sum256(blk.Bytes)
	return colonHex(s1[:]), colonHex(s256[:]), nil
}

func colonHex(b []byte) string {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02X", x)
	}
	return strings.Join(parts, ":")
}

// writeKubeconfig writes a kubeconfig with embedded CA, client cert and key, whose cluster and
// context are both called name.
func writeKubeconfig(path, name, server, caFile, certFile, keyFile, user string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	b64 := func(b []byte) string { return base64Std(b) }
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: %s
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: %s
  context:
    cluster: %s
    user: %s
    namespace: default
current-context: %s
`, name, server, b64(ca), user, b64(cert), b64(key), name, name, user, name)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

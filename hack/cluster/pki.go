package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// certValidity is how long the cluster's certificates are valid: longer
// than any cluster of make cluster lives.
const certValidity = 365 * 24 * time.Hour

// ca is a certificate authority of the cluster.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// certSpec is one certificate a CA issues.
type certSpec struct {
	name   string // file name: NAME.crt and NAME.key
	cn     string
	orgs   []string
	server bool
	ips    []string
	dns    []string
}

// newCA creates a CA and writes NAME.crt and NAME.key into dir.
func newCA(dir, name, cn string) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA %s: key: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := writeKeyPair(dir, name, der, key); err != nil {
		return nil, err
	}
	return &ca{cert: cert, key: key}, nil
}

// issue writes the certificate s describes, signed by c, into dir.
func (c *ca) issue(dir string, s certSpec) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("certificate %s: key: %w", s.name, err)
	}
	usage := x509.ExtKeyUsageClientAuth
	if s.server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     s.dns,
	}
	for _, ip := range s.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return fmt.Errorf("certificate %s: %w", s.name, err)
	}
	return writeKeyPair(dir, s.name, der, key)
}

func writeKeyPair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pemBlock("CERTIFICATE", der), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), pemBlock("EC PRIVATE KEY", keyDER), 0o600)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// clientCerts are the identities of the cluster's parts, as kubeadm names
// them, each with its kubeconfig.
var clientCerts = []certSpec{
	{name: "admin", cn: "kubernetes-admin", orgs: []string{"system:masters"}},
	{name: "controller-manager", cn: "system:kube-controller-manager"},
	{name: "scheduler", cn: "system:kube-scheduler"},
	{name: "kubelet", cn: "system:node:" + nodeName, orgs: []string{"system:nodes"}},
	{name: "kube-proxy", cn: "system:kube-proxy"},
	// The local volume provisioner, bound to the built-in ClusterRole
	// system:persistent-volume-provisioner.
	{name: "provisioner", cn: "fieldwatch:local-volume-provisioner"},
	// The cluster DNS, bound to ClusterRole fieldwatch:cluster-dns (it
	// reads Services and EndpointSlices).
	{name: "dns", cn: dnsUser},
}

// writePKI creates the cluster CA and every certificate and kubeconfig,
// the service-account signing key, and the audit webhook's CA and
// certificates (bin/cluster/audit: the receiver's tls.crt, tls.key and
// client-ca.crt for Secret fieldwatch-audit-tls; the apiserver's client
// certificate).
func writePKI(p paths) error {
	dir := filepath.Join(p.dir, "pki")
	root, err := newCA(dir, "ca", "fieldwatch-cluster-ca")
	if err != nil {
		return err
	}
	server := certSpec{name: "apiserver", cn: "kube-apiserver", server: true,
		ips: []string{nodeIP, kubernetesServiceIP, "127.0.0.1"},
		dns: []string{apiserverServerName, "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}}
	kubeletClient := certSpec{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}}
	for _, s := range append([]certSpec{server, kubeletClient}, clientCerts...) {
		if err := root.issue(dir, s); err != nil {
			return err
		}
	}
	for _, s := range clientCerts {
		if err := writeKubeconfig(p, s.name); err != nil {
			return err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.pki("sa.key"), pemBlock("EC PRIVATE KEY", der), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(p.pki("sa.pub"), pemBlock("PUBLIC KEY", pub), 0o644); err != nil {
		return err
	}
	return writeAuditPKI(p)
}

// writeAuditPKI writes the audit webhook's certificates: one CA of its
// own (not the cluster CA, which signs the kubelet's certificates too)
// signs the receiver's serving certificate and the apiserver's client
// certificate.
func writeAuditPKI(p paths) error {
	dir := filepath.Join(p.dir, "audit")
	auditCA, err := newCA(dir, "ca", "fieldwatch-audit-ca")
	if err != nil {
		return err
	}
	if err := auditCA.issue(dir, certSpec{name: "tls", cn: auditServiceName, server: true, dns: []string{auditServiceName}}); err != nil {
		return err
	}
	if err := auditCA.issue(dir, certSpec{name: "apiserver", cn: auditWebhookCN}); err != nil {
		return err
	}
	// Secret fieldwatch-audit-tls's keys (deploy/audit/kustomization.yaml).
	caPEM, err := os.ReadFile(p.audit("ca.crt"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.audit("client-ca.crt"), caPEM, 0o644); err != nil {
		return err
	}
	return nil
}

// writeKubeconfig writes bin/cluster/NAME.kubeconfig (bin/cluster/kubeconfig
// for admin) for the client certificate NAME, with the certificates
// embedded.
func writeKubeconfig(p paths, name string) error {
	caPEM, err1 := os.ReadFile(p.pki("ca.crt"))
	crt, err2 := os.ReadFile(p.pki(name + ".crt"))
	key, err3 := os.ReadFile(p.pki(name + ".key"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[networkName] = &clientcmdapi.Cluster{Server: apiserverURL(), CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	cfg.Contexts[networkName] = &clientcmdapi.Context{Cluster: networkName, AuthInfo: name}
	cfg.CurrentContext = networkName
	path := p.conf(name + ".kubeconfig")
	if name == "admin" {
		path = p.kubeconfig()
	}
	return clientcmd.WriteToFile(*cfg, path)
}

func apiserverURL() string { return fmt.Sprintf("https://%s:%d", nodeIP, apiserverPort) }

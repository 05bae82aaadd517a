// Package tlstest makes TLS certificates for the xDS server's tests: a CA and leaf
// certificates for given DNS names, in PEM, as cert-manager would write them into a
// kubernetes.io/tls Secret.
package tlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"time"
)

// CA signs leaf certificates.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// NewCA makes a self-signed CA.
func NewCA() *CA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "inferplane test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, key.Public(), key)
	if err != nil {
		panic(err) // a fixed template: only a programming error gets here
	}
	c, _ := x509.ParseCertificate(der)
	return &CA{Cert: c, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Leaf is a certificate for hosts valid from notBefore to notAfter, with an ECDSA P-256 key;
// its PEM chain is the leaf then the CA.
func (ca *CA) Leaf(hosts []string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	return ca.sign(hosts, notBefore, notAfter, key)
}

// LeafEd25519 is a leaf with an Ed25519 key (which Envoy does not serve).
func (ca *CA) LeafEd25519(hosts []string) (certPEM, keyPEM []byte) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	return ca.sign(hosts, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), key)
}

func (ca *CA) sign(hosts []string, notBefore, notAfter time.Time, key crypto.Signer) ([]byte, []byte) {
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: hosts[0]}, DNSNames: hosts,
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		panic(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		panic(err)
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ca.CertPEM...)
	return chain, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
}

package webhook

import (
	"bytes"
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CertSecret keeps the webhook's serving certificate in a Secret, so that every replica serves
// the same one, and writes its CA into the ValidatingWebhookConfiguration's caBundle. No key
// ever passes through git: the generator renders the configuration without a caBundle and the
// running webhook fills it in.
type CertSecret struct {
	Client client.Client
	Secret types.NamespacedName
	// Hosts are the names the API server reaches the Service by.
	Hosts []string
	// WebhookConfiguration is the name of the ValidatingWebhookConfiguration to fill in.
	WebhookConfiguration string
	// Validity defaults to one year; a certificate is replaced RenewBefore (default 30 days)
	// before it expires.
	Validity, RenewBefore time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
}

func (c *CertSecret) defaults() (now time.Time, validity, renew time.Duration) {
	now, validity, renew = time.Now(), c.Validity, c.RenewBefore
	if c.Now != nil {
		now = c.Now()
	}
	if validity == 0 {
		validity = 365 * 24 * time.Hour
	}
	if renew == 0 {
		renew = 30 * 24 * time.Hour
	}
	return now, validity, renew
}

// Ensure returns the bundle the Secret holds, creating the Secret when it is missing and
// replacing its bundle when it is unusable or expires within RenewBefore. When two replicas
// race, the one that loses takes the winner's bundle.
func (c *CertSecret) Ensure(ctx context.Context) (Bundle, error) {
	now, validity, renew := c.defaults()
	var sec corev1.Secret
	err := c.Client.Get(ctx, c.Secret, &sec)
	switch {
	case apierrors.IsNotFound(err):
		b, err := SelfSigned(c.Hosts, now, validity)
		if err != nil {
			return Bundle{}, err
		}
		sec = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.Secret.Namespace, Name: c.Secret.Name, Labels: map[string]string{
				"app.kubernetes.io/managed-by": "inferplane", "app.kubernetes.io/component": "webhook",
			}},
			Type: corev1.SecretTypeTLS,
			Data: secretData(b),
		}
		if err := c.Client.Create(ctx, &sec); apierrors.IsAlreadyExists(err) {
			return c.Ensure(ctx)
		} else if err != nil {
			return Bundle{}, fmt.Errorf("create Secret %s: %w", c.Secret, err)
		}
		return b, nil
	case err != nil:
		return Bundle{}, fmt.Errorf("read Secret %s: %w", c.Secret, err)
	}
	b := Bundle{CA: sec.Data[CAFile], Cert: sec.Data[CertFile], Key: sec.Data[KeyFile]}
	if notAfter, err := b.Check(c.Hosts); err == nil && now.Add(renew).Before(notAfter) {
		return b, nil
	}
	if b, err = SelfSigned(c.Hosts, now, validity); err != nil {
		return Bundle{}, err
	}
	sec.Data = secretData(b)
	if err := c.Client.Update(ctx, &sec); apierrors.IsConflict(err) {
		return c.Ensure(ctx) // another replica renewed it first
	} else if err != nil {
		return Bundle{}, fmt.Errorf("renew Secret %s: %w", c.Secret, err)
	}
	return b, nil
}

func secretData(b Bundle) map[string][]byte {
	return map[string][]byte{CAFile: b.CA, CertFile: b.Cert, KeyFile: b.Key}
}

// InjectCABundle writes ca into every webhook of the configuration that does not have it yet.
// A configuration that does not exist yet (Argo CD may apply it after the Deployment) is not an
// error: the next call fills it in.
func (c *CertSecret) InjectCABundle(ctx context.Context, ca []byte) error {
	if c.WebhookConfiguration == "" {
		return nil
	}
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Client.Get(ctx, client.ObjectKey{Name: c.WebhookConfiguration}, &vwc); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("read ValidatingWebhookConfiguration %s: %w", c.WebhookConfiguration, err)
	}
	changed := false
	for i := range vwc.Webhooks {
		if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, ca) {
			vwc.Webhooks[i].ClientConfig.CABundle = ca
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := c.Client.Update(ctx, &vwc); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("set caBundle of ValidatingWebhookConfiguration %s: %w", c.WebhookConfiguration, err)
	}
	return nil
}

// Sync makes the cert dir and the configuration match the Secret: Ensure, write the files when
// they differ, inject the CA. The server calls it at start and then periodically, so a renewal
// by any replica reaches all of them (controller-runtime reloads changed files by itself).
func (c *CertSecret) Sync(ctx context.Context, certDir string, current *Bundle) error {
	b, err := c.Ensure(ctx)
	if err != nil {
		return err
	}
	if current == nil || !bytes.Equal(current.Cert, b.Cert) || !bytes.Equal(current.Key, b.Key) {
		if err := b.WriteDir(certDir); err != nil {
			return fmt.Errorf("write the serving certificate to %s: %w", certDir, err)
		}
		if current != nil {
			*current = b
		}
	}
	return c.InjectCABundle(ctx, b.CA)
}

// Hosts are the names the API server reaches the webhook's Service by: its serving certificate
// must cover them.
func Hosts(namespace, name string) []string {
	return []string{name + "." + namespace + ".svc", name + "." + namespace + ".svc.cluster.local", name + "." + namespace, name}
}

package install

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultRedisImage is the store of the rate limits' shared counts: an exact release, never a
// tag that moves.
const (
	DefaultRedisImage = "docker.io/library/redis:7.4.2"
	RedisPort         = 6379
)

// RedisAddress is where the xDS servers reach the limits store.
func (o Options) RedisAddress() string {
	return o.Name + "-redis." + o.Namespace + ".svc:" + strconv.Itoa(RedisPort)
}

// redisObjects are the limits store every xDS server replica shares: a StatefulSet of one Redis
// with its append-only file on a volume of its own (a restart keeps the counts; the replicas
// also put back what they know, docs/keys.md), and its Service. One Redis: the counters are
// small and every change is one short Lua script; while it is down the replicas enforce the
// counts they know (each tenant's onStoreDown).
func redisObjects(o Options) []client.Object {
	var uid int64 = 999 // the redis image's user
	c := corev1.Container{
		Name: "redis", Image: o.RedisImage,
		Args: []string{"redis-server", "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
			"--maxmemory", "200mb", "--maxmemory-policy", "volatile-ttl", "--protected-mode", "no"},
		Ports: []corev1.ContainerPort{{Name: "redis", ContainerPort: RedisPort}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		ReadinessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("redis")}}, PeriodSeconds: 5},
		VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
		SecurityContext: restricted(),
	}
	claim := volumeClaim(o, "data", "redis", "1Gi")
	sts := &appsv1.StatefulSet{TypeMeta: typeStatefulSet, ObjectMeta: meta(o, o.Name+"-redis", "redis"),
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr(int32(1)), ServiceName: o.Name + "-redis",
			Selector: &metav1.LabelSelector{MatchLabels: selector(o, "redis")},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(o, "redis")},
				Spec: corev1.PodSpec{
					ServiceAccountName: o.Name + "-redis", Containers: []corev1.Container{c},
					AutomountServiceAccountToken: ptr(false),
					SecurityContext:              podSecurity(uid, true),
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{claim},
		}}
	svc := &corev1.Service{TypeMeta: typeService, ObjectMeta: meta(o, o.Name+"-redis", "redis"),
		Spec: corev1.ServiceSpec{Selector: selector(o, "redis"), Ports: []corev1.ServicePort{
			{Name: "redis", Port: RedisPort, TargetPort: intstr.FromString("redis"), Protocol: corev1.ProtocolTCP}}}}
	return []client.Object{serviceAccount(o, o.Name+"-redis", false), sts, svc}
}

package job

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// LogReader reads the start of a container's log. The executor reads a
// result from the log only when it did not fit in the termination message.
// It is an interface so tests can stand in for the kubelet, which serves
// logs and which envtest does not have.
type LogReader interface {
	// ReadLog returns at most limitBytes bytes from the start of the log
	// of container in namespace/pod.
	ReadLog(ctx context.Context, namespace, pod, container string, limitBytes int64) ([]byte, error)
}

// LogReaderFunc adapts a function to LogReader.
type LogReaderFunc func(ctx context.Context, namespace, pod, container string, limitBytes int64) ([]byte, error)

// ReadLog calls f.
func (f LogReaderFunc) ReadLog(ctx context.Context, namespace, pod, container string, limitBytes int64) ([]byte, error) {
	return f(ctx, namespace, pod, container, limitBytes)
}

// NewPodLogReader reads logs through the API server (pods/log, which the
// operator's role must allow).
func NewPodLogReader(cs kubernetes.Interface) LogReader {
	return LogReaderFunc(func(ctx context.Context, namespace, pod, container string, limitBytes int64) ([]byte, error) {
		req := cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{
			Container:  container,
			LimitBytes: &limitBytes,
		})
		rc, err := req.Stream(ctx)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		// LimitBytes is a hint to the kubelet ("slightly more or less"):
		// enforce it here too.
		b, err := io.ReadAll(io.LimitReader(rc, limitBytes))
		if err != nil {
			return nil, fmt.Errorf("reading the log of %s/%s: %w", namespace, pod, err)
		}
		return b, nil
	})
}

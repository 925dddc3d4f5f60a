// Package kubeevent reads Kubernetes Events the one way every lister of
// them shares: the kubernetes.events tool, the console's story of a run
// and the plugin's watch order events by when they were last seen.
package kubeevent

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LastSeen is when a core API Event was last seen: its series' last
// observation; else its lastTimestamp, the last occurrence that the
// recorders before events.k8s.io count; else its eventTime, when an
// events.k8s.io recorder first saw it; else when it was created.
func LastSeen(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// LastSeenV1 is LastSeen for an Event read through events.k8s.io, where
// lastTimestamp is deprecatedLastTimestamp.
func LastSeenV1(e *eventsv1.Event) time.Time {
	core := corev1.Event{
		ObjectMeta:    metav1.ObjectMeta{CreationTimestamp: e.CreationTimestamp},
		EventTime:     e.EventTime,
		LastTimestamp: e.DeprecatedLastTimestamp,
	}
	if e.Series != nil {
		core.Series = &corev1.EventSeries{LastObservedTime: e.Series.LastObservedTime}
	}
	return LastSeen(&core)
}

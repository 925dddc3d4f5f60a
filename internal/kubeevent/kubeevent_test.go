package kubeevent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An event is placed at the latest time it says it was seen: the series'
// last observation, then lastTimestamp, then eventTime (the first
// observation), then its creation; through either API.
func TestLastSeen_takesTheLatestObservationTheEventRecords(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 12, 6, h, 0, 0, 0, time.UTC) }
	created, first, last, series := at(1), at(2), at(3), at(4)
	for _, tc := range []struct {
		name                      string
		series, eventTime, latest bool
		want                      time.Time
	}{
		{name: "only created", want: created},
		{name: "eventTime", eventTime: true, want: first},
		{name: "lastTimestamp before eventTime", eventTime: true, latest: true, want: last},
		{name: "series before both", series: true, eventTime: true, latest: true, want: series},
		{name: "series alone", series: true, want: series},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core := corev1.Event{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
			v1 := eventsv1.Event{ObjectMeta: core.ObjectMeta}
			if tc.eventTime {
				core.EventTime, v1.EventTime = metav1.NewMicroTime(first), metav1.NewMicroTime(first)
			}
			if tc.latest {
				core.LastTimestamp, v1.DeprecatedLastTimestamp = metav1.NewTime(last), metav1.NewTime(last)
			}
			if tc.series {
				core.Series = &corev1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(series)}
				v1.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(series)}
			}
			if got := LastSeen(&core); !got.Equal(tc.want) {
				t.Errorf("LastSeen = %s, want %s", got, tc.want)
			}
			if got := LastSeenV1(&v1); !got.Equal(tc.want) {
				t.Errorf("LastSeenV1 = %s, want %s", got, tc.want)
			}
		})
	}
}

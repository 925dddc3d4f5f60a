// Package schedtime reads an AgentSchedule's cron schedule in its time
// zone: the schedule controller runs by it, and the console shows the
// next run time by it.
package schedtime

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/robfig/cron/v3"
)

// Of reads the schedule in its time zone: spec.timeZone, else zone. A
// schedule that names its own zone (CRON_TZ= or TZ=) is refused with
// spec.timeZone, as CronJob refuses it: two zones would disagree.
func Of(s *v1alpha1.AgentSchedule, zone *time.Location) (cron.Schedule, *time.Location, error) {
	loc := zone
	if tz := s.Spec.TimeZone; tz != nil {
		if strings.Contains(s.Spec.Schedule, "TZ") {
			return nil, nil, fmt.Errorf("spec.schedule %q names a time zone and spec.timeZone is set: keep only spec.timeZone", s.Spec.Schedule)
		}
		l, err := time.LoadLocation(*tz)
		if err != nil || *tz == "" || strings.EqualFold(*tz, "local") {
			return nil, nil, fmt.Errorf("spec.timeZone %q is not an IANA time zone (such as Europe/Berlin or UTC)", *tz)
		}
		loc = l
	}
	sched, err := cron.ParseStandard(s.Spec.Schedule)
	if err != nil {
		return nil, nil, fmt.Errorf("spec.schedule %q is not a cron schedule: %v", s.Spec.Schedule, err)
	}
	return sched, loc, nil
}

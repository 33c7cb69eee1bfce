import { describe, expect, it } from 'vitest'
import {
  awaitsReport,
  describeEntry,
  gpuLabel,
  incidentFromEvent,
  incidentSeconds,
  lastStepDue,
  lastStepSentence,
  lastStepView,
  parseStep,
  stepText,
  upcomingSteps,
  type TimelineEntry,
} from './violations'

const entry = (e: Partial<TimelineEntry>): TimelineEntry => ({
  at: '2026-01-01T10:00:00Z',
  kind: 'opened',
  step_index: null,
  handler: null,
  target: null,
  ok: null,
  detail: null,
  ...e,
})

const incident = {
  opened_at: '2026-01-01T10:00:00Z',
  resolved_at: null as string | null,
  status: 'open',
  steps: ['0s terminal offender', '60s email offender+admins', '5m terminate', 'bogus'],
  last_step: null,
}

describe('steps', () => {
  it('parses configured steps', () => {
    expect(parseStep('60s email offender+admins', 1)).toEqual({ index: 1, text: '60s email offender+admins', afterS: 60, action: 'email', recipients: ['offender', 'admins'] })
    expect(parseStep('1.5h kill')?.afterS).toBe(5400)
    expect(parseStep('500ms sms admins')?.afterS).toBe(0.5)
    expect(parseStep('soon kill')).toBeNull()
    expect(stepText(parseStep('0s webhook owner+admins')!)).toBe('webhook → owner, admins')
    expect(stepText(parseStep('300s terminate')!)).toBe('terminate')
  })
  it('knows the last step due', () => {
    expect(lastStepDue(incident, new Date('2026-01-01T10:00:30Z'))?.action).toBe('terminal')
    expect(lastStepDue(incident, new Date('2026-01-01T10:02:00Z'))?.action).toBe('email')
    expect(lastStepDue({ ...incident, resolved_at: '2026-01-01T10:00:10Z' }, new Date('2026-01-01T11:00:00Z'))?.action).toBe('terminal')
    expect(lastStepDue({ ...incident, steps: [] })).toBeNull()
  })
  it('lists upcoming steps not yet taken, none once resolved', () => {
    const timeline = [entry({ kind: 'opened' }), entry({ kind: 'escalated', step_index: 0, detail: '0s terminal offender' })]
    const up = upcomingSteps(incident, timeline)
    expect(up.map((u) => u.step.action)).toEqual(['email', 'terminate'])
    expect(up[1].at.toISOString()).toBe('2026-01-01T10:05:00.000Z')
    expect(upcomingSteps({ ...incident, status: 'resolved' }, timeline)).toEqual([])
  })
})

describe('incidents', () => {
  it('labels the GPU as host:index', () => {
    expect(gpuLabel({ host: 'sim-001', gpu_index: 3, gpu_uuid: 'GPU-x' })).toBe('sim-001:3')
    expect(gpuLabel({ host: 'h', gpu_index: null, gpu_uuid: 'GPU-1234567890abcdef' })).toBe('h:GPU-12345678')
  })
  it('measures how long it lasted', () => {
    expect(incidentSeconds(incident, new Date('2026-01-01T10:01:00Z'))).toBe(60)
    expect(incidentSeconds({ ...incident, resolved_at: '2026-01-01T10:00:30Z' }, new Date('2026-01-02Z'))).toBe(30)
  })
  it('builds a list item from an event', () => {
    const i = incidentFromEvent({ incident_id: 'abc', host: 'sim-001', gpu_index: 0, gpu_uuid: 'u', offender: 'bob', owner: 'alice', since: '2026-01-01T10:00:00Z' })
    expect(i).toMatchObject({ id: 'abc', status: 'open', offender: 'bob', owner: 'alice' })
    const resolved = incidentFromEvent({ incident_id: 'abc', resolved_at: '2026-01-01T11:00:00Z', reason: 'processes ended' }, i!)
    expect(resolved).toMatchObject({ status: 'resolved', resolve_reason: 'processes ended', offender: 'bob' })
    expect(incidentFromEvent({})).toBeNull()
  })
})

describe('timeline wording', () => {
  it('describes each kind', () => {
    expect(describeEntry(entry({ kind: 'opened', detail: 'pids 1 (python)' }))).toEqual({ title: 'Opened', text: 'pids 1 (python)', tone: 'danger' })
    expect(describeEntry(entry({ kind: 'escalated', step_index: 1, detail: '60s email offender+admins' }))).toEqual({ title: 'Step 2 taken', text: 'email → offender, admins', tone: 'warn' })
    expect(describeEntry(entry({ kind: 'action', handler: 'terminal', target: 'sim-001', ok: false, detail: 'no terminal session' }))).toEqual({
      title: 'Action failed',
      text: 'terminal → sim-001: no terminal session',
      tone: 'danger',
    })
    expect(describeEntry(entry({ kind: 'action', handler: 'email', target: 'bob@x', ok: true })).tone).toBe('ok')
    expect(describeEntry(entry({ kind: 'resolved', detail: 'processes ended' })).title).toBe('Resolved')
    expect(describeEntry(entry({ kind: 'updated', detail: 'pids 1, 2' })).title).toBe('Processes changed')
  })
})

describe('the last step in the list', () => {
  const NO_SMTP = 'e-mail is not configured (smtp_host)'
  const taken = (outcome: string, detail: string | null = null) => ({
    ...incident,
    last_step: { index: 1, step: '60s email offender+admins', handler: 'email', taken_at: '2026-01-01T10:01:00Z', outcome, detail },
  })

  it('shows a failed step as failed, with why', () => {
    const view = lastStepView(taken('failed', NO_SMTP))!
    expect(view).toEqual({ text: 'email → offender, admins', outcome: 'failed', detail: NO_SMTP, tone: 'danger' })
    expect(lastStepSentence(view)).toBe(`email → offender, admins — failed (${NO_SMTP})`)
  })

  it('says what became of it otherwise', () => {
    expect(lastStepSentence(lastStepView(taken('ok'))!)).toBe('email → offender, admins — done')
    expect(lastStepView(taken('partly failed', 'refused'))!.tone).toBe('warn')
    expect(lastStepSentence(lastStepView(taken('pending'))!)).toBe('email → offender, admins — pending')
  })

  it('a pending step is looked at again; a reported or skipped one is not', () => {
    expect(awaitsReport([taken('ok'), taken('pending')])).toBe(true)
    expect(awaitsReport([taken('skipped'), taken('failed'), incident])).toBe(false)
  })

  it('shows a step whose channel is not set up as skipped, with why', () => {
    const view = lastStepView(taken('skipped', 'skipped: e-mail is not set up'))!
    expect(view.tone).toBe('warn')
    expect(lastStepSentence(view)).toBe('email → offender, admins — skipped (skipped: e-mail is not set up)')
  })

  it('the API\'s last step wins over the one due by time', () => {
    // 10:06: the terminate step is due by time, but the service says email was the last taken
    expect(lastStepView(taken('ok'), new Date('2026-01-01T10:06:00Z'))!.text).toBe('email → offender, admins')
  })

  it('without the API\'s word (an incident from an event), the step due by time, outcome unknown', () => {
    const view = lastStepView(incident, new Date('2026-01-01T10:02:00Z'))!
    expect(view).toEqual({ text: 'email → offender, admins', outcome: null, detail: null, tone: 'muted' })
    expect(lastStepSentence(view)).toBe('email → offender, admins')
    expect(lastStepView({ ...incident, steps: [] })).toBeNull()
  })
})

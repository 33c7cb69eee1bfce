// Pure helpers for the violations pages: GPU labels, escalation steps, timeline wording.
import type { Schemas } from '../../api/client'

export type Incident = Schemas['Incident']
export type TimelineEntry = Schemas['TimelineEntry']

/** "sim-001:3" (or the host and a short uuid when the index is unknown). */
export function gpuLabel(i: { host: string; gpu_index: number | null; gpu_uuid: string }): string {
  return i.gpu_index == null ? `${i.host}:${i.gpu_uuid.slice(0, 12)}` : `${i.host}:${i.gpu_index}`
}

export interface Step {
  index: number
  text: string
  afterS: number
  action: string
  recipients: string[]
}

const UNIT_S: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 }
const STEP = /^\s*(\d+(?:\.\d+)?)(ms|s|m|h)\s+([a-z][a-z0-9_-]*)(?:\s+([a-z]+(?:\+[a-z]+)*))?\s*$/

/** "60s email offender+admins" as its parts; null when it does not read as a step. */
export function parseStep(text: string, index = 0): Step | null {
  const m = STEP.exec(text)
  if (!m) return null
  return {
    index,
    text,
    afterS: Number(m[1]) * UNIT_S[m[2]],
    action: m[3],
    recipients: m[4] ? m[4].split('+') : [],
  }
}

/** "email to offender, admins" */
export function stepText(step: Step): string {
  return step.recipients.length ? `${step.action} → ${step.recipients.join(', ')}` : step.action
}

/** When each configured step falls due (opened_at + its delay). */
export function stepTimes(incident: Pick<Incident, 'steps' | 'opened_at'>): { step: Step; at: Date }[] {
  const opened = new Date(incident.opened_at).getTime()
  return incident.steps
    .map((text, i) => parseStep(text, i))
    .filter((s): s is Step => s !== null)
    .map((step) => ({ step, at: new Date(opened + step.afterS * 1000) }))
}

/** The last step due by now (or by its resolution): what has been taken, as far as the list knows. */
export function lastStepDue(incident: Pick<Incident, 'steps' | 'opened_at' | 'resolved_at'>, now = new Date()): Step | null {
  const until = incident.resolved_at ? Math.min(new Date(incident.resolved_at).getTime(), now.getTime()) : now.getTime()
  const due = stepTimes(incident).filter((s) => s.at.getTime() <= until)
  return due.length ? due[due.length - 1].step : null
}

export interface LastStepView {
  /** "email → owner, admins" */
  text: string
  /** pending, ok, failed, partly failed or skipped (from the API); null: not known (an incident built
   *  from an event before the list is reloaded, which shows the last step due by time) */
  outcome: string | null
  /** why it failed */
  detail: string | null
  tone: Tone
}

const OUTCOME_TONE: Record<string, Tone> = { ok: 'ok', failed: 'danger', 'partly failed': 'warn', skipped: 'warn', pending: 'muted' }

/** The last step and what became of it, for the list: "email → admins — failed" and why. */
export function lastStepView(incident: Pick<Incident, 'steps' | 'opened_at' | 'resolved_at' | 'last_step'>, now = new Date()): LastStepView | null {
  const taken = incident.last_step
  if (taken && 'outcome' in taken) {
    const step = parseStep(taken.step, taken.index)
    return {
      text: step ? stepText(step) : taken.handler ?? taken.step,
      outcome: taken.outcome,
      detail: taken.detail ?? null,
      tone: OUTCOME_TONE[taken.outcome] ?? 'muted',
    }
  }
  const due = lastStepDue(incident, now)
  return due ? { text: stepText(due), outcome: null, detail: null, tone: 'muted' } : null
}

/** "done" for ok: the step's handler did what it does. */
export function outcomeWord(outcome: string): string {
  return outcome === 'ok' ? 'done' : outcome
}

/** "email → admins — failed (e-mail is not configured)" */
export function lastStepSentence(view: LastStepView): string {
  const outcome = view.outcome ? ` — ${outcomeWord(view.outcome)}` : ''
  return `${view.text}${outcome}${view.detail ? ` (${view.detail})` : ''}`
}

/** Steps not taken yet (not escalated in the timeline), with when they fall due; none once resolved. */
export function upcomingSteps(
  incident: Pick<Incident, 'steps' | 'opened_at' | 'status'>,
  timeline: TimelineEntry[],
): { step: Step; at: Date }[] {
  if (incident.status !== 'open') return []
  const taken = new Set(timeline.filter((e) => e.kind === 'escalated' && e.step_index != null).map((e) => e.step_index))
  return stepTimes(incident).filter((s) => !taken.has(s.step.index))
}

/** How long it lasted (to its resolution) or has lasted so far, in seconds. */
export function incidentSeconds(incident: Pick<Incident, 'opened_at' | 'resolved_at'>, now = new Date()): number {
  const end = incident.resolved_at ? new Date(incident.resolved_at) : now
  return Math.max(0, (end.getTime() - new Date(incident.opened_at).getTime()) / 1000)
}

export type Tone = 'ok' | 'warn' | 'danger' | 'muted'

/** A timeline entry as a heading, a sentence and a tone. */
export function describeEntry(e: TimelineEntry): { title: string; text: string; tone: Tone } {
  const detail = e.detail ?? ''
  switch (e.kind) {
    case 'opened':
      return { title: 'Opened', text: detail || 'Foreign process seen on the GPU', tone: 'danger' }
    case 'updated':
      return { title: 'Processes changed', text: detail, tone: 'muted' }
    case 'escalated': {
      const step = parseStep(detail, e.step_index ?? 0)
      const n = e.step_index != null ? ` ${e.step_index + 1}` : ''
      return { title: `Step${n} taken`, text: step ? stepText(step) : detail || (e.handler ?? ''), tone: 'warn' }
    }
    case 'action': {
      const who = [e.handler, e.target].filter(Boolean).join(' → ')
      // ok null: skipped (its channel is not set up; the detail says why)
      const result = e.ok == null ? 'skipped' : e.ok ? 'succeeded' : 'failed'
      return {
        title: `Action ${result}`,
        text: [who, detail].filter(Boolean).join(': '),
        tone: e.ok === false ? 'danger' : e.ok ? 'ok' : 'warn',
      }
    }
    case 'resolved':
      return { title: 'Resolved', text: detail, tone: 'ok' }
    default:
      return { title: e.kind, text: detail, tone: 'muted' }
  }
}

/** Incident events carry its context: enough to show it in the list until the next reload. */
export function incidentFromEvent(data: Record<string, unknown>, existing?: Incident): Incident | null {
  const id = data.incident_id
  if (typeof id !== 'string') return null
  const base: Incident = existing ?? {
    id,
    status: 'open',
    mode: String(data.mode ?? 'reservations'),
    host: String(data.host ?? ''),
    gpu_uuid: String(data.gpu_uuid ?? ''),
    gpu_index: (data.gpu_index as number | null) ?? null,
    offender: String(data.offender ?? ''),
    owner: (data.owner as string | null) ?? null,
    reservation_id: (data.reservation_id as number | null) ?? null,
    reservation_start: (data.reservation_start as string | null) ?? null,
    reservation_end: (data.reservation_end as string | null) ?? null,
    opened_at: String(data.since ?? new Date().toISOString()),
    since: String(data.since ?? ''),
    last_seen_at: new Date().toISOString(),
    resolved_at: null,
    resolve_reason: null,
    processes: [],
    steps: [],
    last_step: null,
  }
  const next: Incident = { ...base }
  if (Array.isArray(data.processes)) next.processes = data.processes as Incident['processes']
  if (typeof data.resolved_at === 'string') {
    next.status = 'resolved'
    next.resolved_at = data.resolved_at
    next.resolve_reason = (data.reason as string) ?? null
  }
  return next
}

/** A handler reports its step's outcome moments after the step is taken, with no event of its
 *  own: while a listed step is still pending, a page looks again this often, at most this many
 *  times in a row. */
export const PENDING_LOOK_MS = 1000
export const PENDING_LOOKS = 10

/** Whether any of these incidents' last step awaits its handler's report. */
export function awaitsReport(incidents: readonly Pick<Incident, 'last_step'>[]): boolean {
  return incidents.some((i) => i.last_step?.outcome === 'pending')
}

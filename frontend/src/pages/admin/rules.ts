// Access rules in the admin UI: the form's state, its conversion to and from the API body,
// validation, and the rule as a sentence ("group ml: GPUs of sim-001, Mon–Fri 08:00–18:00 …").
import type { Schemas } from '../../api/client'
import { fromLocalInput, toLocalInput } from '../../format'

export type Rule = Schemas['Rule']
export type RuleBody = Schemas['RuleBody']

export const DAY_SHORT = ['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'] as const
export const DAY_LONG = ['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday'] as const

export interface WindowForm {
  days: number[] // 0 = Monday
  start: string // HH:MM
  end: string // HH:MM, or 24:00
}

export interface RuleForm {
  name: string
  description: string
  users: string[]
  groups: string[]
  allGpus: boolean
  hosts: string[]
  gpus: string[] // uuids
  labels: string // a label selector, comma-separated: "model=A100-80GB, arch!=volta"
  validFrom: string // <input type="datetime-local">, '' = now
  validUntil: string // '' = open-ended
  timezone: string
  windows: WindowForm[]
  maxGpus: string // '' = no limit
  maxDurationHours: string
  maxGpuHoursPerWeek: string
  // Idle policy: off by default; the example values are shown ready to switch on.
  idleOn: boolean
  idleUtil: string // below this utilisation (%) ...
  idleMemory: string // ... and this much memory (MiB) ...
  idleFor: string // ... for this many minutes: idle, the owner is told
  idleGrace: string // minutes to answer before the rest is released
  idleSnooze: string // minutes "I still need it" snoozes the policy
}

/** The example policy (docs/admins/idle-reservations.md, `services/reservations/idle/policy.py` EXAMPLE). */
export const IDLE_EXAMPLE = { idleUtil: '5', idleMemory: '1024', idleFor: '60', idleGrace: '30', idleSnooze: '120' }

export function emptyForm(timezone = 'UTC'): RuleForm {
  return {
    name: '',
    description: '',
    users: [],
    groups: [],
    allGpus: false,
    hosts: [],
    gpus: [],
    labels: '',
    validFrom: '',
    validUntil: '',
    timezone,
    windows: [],
    maxGpus: '',
    maxDurationHours: '',
    maxGpuHoursPerWeek: '',
    idleOn: false,
    ...IDLE_EXAMPLE,
  }
}

/** A number without trailing zeros: 1.5, 8, 0.25. */
function num(value: number): string {
  return String(Math.round(value * 1000) / 1000)
}

export function ruleToForm(rule: Rule): RuleForm {
  return {
    name: rule.name,
    description: rule.description,
    users: [...rule.users],
    groups: [...rule.groups],
    allGpus: rule.all_gpus,
    hosts: [...rule.hosts],
    gpus: [...rule.gpus],
    labels: (rule.labels ?? []).join(', '),
    validFrom: toLocalInput(new Date(rule.valid_from)),
    validUntil: rule.valid_until ? toLocalInput(new Date(rule.valid_until)) : '',
    timezone: rule.timezone,
    windows: rule.windows.map((w) => ({ days: [...w.days].sort(), start: w.start, end: w.end })),
    maxGpus: rule.max_gpus == null ? '' : String(rule.max_gpus),
    maxDurationHours: rule.max_duration_s == null ? '' : num(rule.max_duration_s / 3600),
    maxGpuHoursPerWeek: rule.max_gpu_hours_per_week == null ? '' : num(rule.max_gpu_hours_per_week),
    ...idleToForm(rule.idle_policy ?? null),
  }
}

function idleToForm(policy: Rule['idle_policy'] | null): Pick<RuleForm, 'idleOn' | 'idleUtil' | 'idleMemory' | 'idleFor' | 'idleGrace' | 'idleSnooze'> {
  if (!policy) return { idleOn: false, ...IDLE_EXAMPLE }
  return {
    idleOn: true,
    idleUtil: num(policy.below_util_percent),
    idleMemory: num(policy.below_memory_mib),
    idleFor: num(policy.for_minutes),
    idleGrace: num(policy.grace_minutes),
    idleSnooze: num(policy.snooze_minutes),
  }
}

/** A number field's value ('' or blank: none). Vue gives <input type="number"> values as numbers. */
function optionalNumber(text: string | number): number | null {
  const t = String(text ?? '').trim()
  return t === '' ? null : Number(t)
}

/** The API body (PUT replaces the whole rule, so every field is sent). */
export function formToBody(form: RuleForm): RuleBody {
  const hours = optionalNumber(form.maxDurationHours)
  return {
    name: form.name.trim(),
    description: form.description.trim(),
    users: [...form.users],
    groups: [...form.groups],
    all_gpus: form.allGpus,
    hosts: form.allGpus ? [] : [...form.hosts],
    gpus: form.allGpus ? [] : [...form.gpus],
    labels: labelTerms(form.labels),
    valid_from: form.validFrom ? fromLocalInput(form.validFrom) : null,
    valid_until: form.validUntil ? fromLocalInput(form.validUntil) : null,
    timezone: form.timezone || 'UTC',
    windows: form.windows.map((w) => ({ days: [...w.days].sort((a, b) => a - b), start: w.start, end: w.end })),
    max_gpus: optionalNumber(form.maxGpus),
    max_duration_s: hours == null ? null : Math.round(hours * 3600),
    max_gpu_hours_per_week: optionalNumber(form.maxGpuHoursPerWeek),
    idle_policy: form.idleOn
      ? {
          below_util_percent: Number(form.idleUtil),
          below_memory_mib: Number(form.idleMemory),
          for_minutes: Number(form.idleFor),
          grace_minutes: Number(form.idleGrace),
          snooze_minutes: Number(form.idleSnooze),
        }
      : null,
  }
}

const TIME = /^([01]\d|2[0-3]):[0-5]\d$/

/** What is wrong with a weekly window, or null. */
export function windowProblem(w: WindowForm): string | null {
  if (!w.days.length) return 'pick at least one day'
  if (!TIME.test(w.start)) return 'start must be a time HH:MM'
  if (!TIME.test(w.end) && w.end !== '24:00') return 'end must be a time HH:MM'
  return null
}

/** True when the window runs over midnight into the next day (its end is not after its start). */
export function overnight(w: WindowForm): boolean {
  if (w.start === '00:00' && (w.end === '00:00' || w.end === '24:00')) return false
  return w.end !== '24:00' && w.end <= w.start
}

/** Per-field problems of the form (empty: it may be sent). */
export function validateForm(form: RuleForm): Record<string, string> {
  const problems: Record<string, string> = {}
  if (!form.name.trim()) problems.name = 'a rule needs a name'
  if (!form.users.length && !form.groups.length) problems.subjects = 'grant it to at least one user or group'
  const labels = labelTerms(form.labels)
  if (!form.allGpus && !form.hosts.length && !form.gpus.length && !labels.length) {
    problems.objects = 'grant every GPU, or pick hosts, GPUs or labels'
  }
  const badLabel = labels.map(labelProblem).find((p) => p)
  if (badLabel) problems.labels = badLabel
  if (form.validFrom && form.validUntil && new Date(form.validUntil) <= new Date(form.validFrom)) {
    problems.validUntil = 'must be later than “valid from”'
  }
  form.windows.forEach((w, i) => {
    const p = windowProblem(w)
    if (p && !problems.windows) problems.windows = `window ${i + 1}: ${p}`
  })
  const positive = (text: string | number, integer: boolean): boolean => {
    const n = optionalNumber(text)
    return n == null || (Number.isFinite(n) && n > 0 && (!integer || Number.isInteger(n)))
  }
  if (!positive(form.maxGpus, true)) problems.maxGpus = 'a whole number, at least 1'
  if (!positive(form.maxDurationHours, false)) problems.maxDurationHours = 'more than zero hours'
  if (!positive(form.maxGpuHoursPerWeek, false)) problems.maxGpuHoursPerWeek = 'more than zero'
  if (form.idleOn) {
    const required = (text: string | number): boolean => optionalNumber(text) != null && positive(text, false)
    for (const key of ['idleUtil', 'idleMemory', 'idleFor', 'idleGrace', 'idleSnooze'] as const) {
      if (!required(form[key])) problems[key] = 'more than zero'
    }
    if (!problems.idleUtil && Number(form.idleUtil) > 100) problems.idleUtil = 'at most 100 %'
  }
  return problems
}

/** Days as people write them: "Mon–Fri", "Mon, Wed, Fri", "Sat–Sun, Wed", "every day". */
export function daysText(days: readonly number[]): string {
  const sorted = [...new Set(days)].filter((d) => d >= 0 && d <= 6).sort((a, b) => a - b)
  if (sorted.length === 7) return 'every day'
  const runs: number[][] = []
  for (const d of sorted) {
    const last = runs[runs.length - 1]
    if (last && d === last[last.length - 1] + 1) last.push(d)
    else runs.push([d])
  }
  return runs
    .map((r) => (r.length >= 3 ? `${DAY_SHORT[r[0]]}–${DAY_SHORT[r[r.length - 1]]}` : r.map((d) => DAY_SHORT[d]).join(', ')))
    .join(', ')
}

/** "Mon–Fri 08:00–18:00", "Fri 22:00–06:00 (overnight)", "Sat–Sun all day". */
export function windowText(w: WindowForm | Schemas['RuleWindow']): string {
  const days = daysText(w.days)
  if (w.start === '00:00' && (w.end === '00:00' || w.end === '24:00')) return `${days} all day`
  return `${days} ${w.start}–${w.end}${overnight(w) ? ' (overnight)' : ''}`
}

/** 8 h, 30 min, 1.5 h, 2 d. */
export function hoursText(seconds: number): string {
  if (seconds < 3600) return `${num(seconds / 60)} min`
  if (seconds >= 86400 && seconds % 86400 === 0) return `${seconds / 86400} d`
  return `${num(seconds / 3600)} h`
}

/** uuid -> "host:index", to name GPUs in sentences. */
export type GpuNames = Record<string, string>

export function subjectsText(rule: Pick<Rule, 'users' | 'groups'>): string {
  const parts = [
    ...rule.groups.map((g) => `group ${g}`),
    ...(rule.users.length ? [`${rule.users.length === 1 ? 'user' : 'users'} ${rule.users.join(', ')}`] : []),
  ]
  return parts.length ? parts.join(', ') : 'nobody'
}

export function objectsText(rule: Pick<Rule, 'all_gpus' | 'hosts' | 'gpus'> & { labels?: string[] }, names: GpuNames = {}): string {
  const labels = rule.labels ?? []
  const labelled = labels.length ? ` labelled ${labels.join(', ')}` : ''
  if (rule.all_gpus) return `every GPU${labelled}`
  const parts: string[] = []
  if (rule.hosts.length) parts.push(`GPUs of ${rule.hosts.join(', ')}`)
  if (rule.gpus.length) parts.push(`${rule.gpus.length === 1 ? 'GPU' : 'GPUs'} ${rule.gpus.map((u) => names[u] ?? u).join(', ')}`)
  if (!parts.length) return labels.length ? `every GPU${labelled}` : 'no GPU'
  return parts.join(' and ') + labelled
}

/** The label keys a selector may name (services/shared/gpu_labels.py KEYS). */
export const LABEL_KEYS = ['model', 'memory', 'arch'] as const

/** "model=A100-80GB, arch!=volta" as the API's list of terms. */
export function labelTerms(text: string): string[] {
  return text
    .split(/[,\s]+/)
    .map((t) => t.trim())
    .filter((t) => t)
}

/** Why a selector term is refused (as the server says it), or '' when it is one. */
export function labelProblem(term: string): string {
  const found = /^([a-z]+)(!?=)([A-Za-z0-9][A-Za-z0-9._+-]*)$/.exec(term)
  if (!found || term.length > 64) return `${term}: write key=value or key!=value (e.g. model=A100-80GB)`
  if (!(LABEL_KEYS as readonly string[]).includes(found[1])) return `${term}: the label keys are ${LABEL_KEYS.join(', ')}`
  return ''
}

function dateText(iso: string): string {
  return new Date(iso).toLocaleDateString(undefined, { day: 'numeric', month: 'short', year: 'numeric' })
}

/** The whole rule in one readable line. */
export function ruleSentence(rule: Rule, names: GpuNames = {}, now: Date = new Date()): string {
  const parts = [objectsText(rule, names)]
  if (rule.windows.length) parts.push(`${rule.windows.map(windowText).join('; ')} ${rule.timezone}`)
  else parts.push('any time')
  if (new Date(rule.valid_from) > now) parts.push(`from ${dateText(rule.valid_from)}`)
  if (rule.valid_until) parts.push(`until ${dateText(rule.valid_until)}`)
  if (rule.max_gpus != null) parts.push(`max ${rule.max_gpus} GPU${rule.max_gpus === 1 ? '' : 's'}`)
  if (rule.max_duration_s != null) parts.push(`${hoursText(rule.max_duration_s)} per reservation`)
  if (rule.max_gpu_hours_per_week != null) parts.push(`${num(rule.max_gpu_hours_per_week)} GPU-h per week`)
  const idle = rule.idle_policy
  if (idle) {
    parts.push(
      `idle (< ${num(idle.below_util_percent)} %, < ${num(idle.below_memory_mib)} MiB for ${num(idle.for_minutes)} min) ` +
        `released after ${num(idle.grace_minutes)} min without an answer`,
    )
  }
  return `${subjectsText(rule)}: ${parts.join(', ')}`
}

/** Is the rule in force now, later, or over? */
export function ruleState(rule: Pick<Rule, 'valid_from' | 'valid_until'>, now: Date = new Date()): 'active' | 'future' | 'expired' {
  if (new Date(rule.valid_from) > now) return 'future'
  if (rule.valid_until && new Date(rule.valid_until) <= now) return 'expired'
  return 'active'
}

/** Every IANA zone the browser knows (UTC first), or a short list on old browsers. */
export function timeZones(): string[] {
  const intl = Intl as unknown as { supportedValuesOf?: (key: string) => string[] }
  const zones = intl.supportedValuesOf?.('timeZone') ?? ['Europe/London', 'Europe/Warsaw', 'America/New_York']
  return ['UTC', ...zones.filter((z) => z !== 'UTC')]
}

// The job pages' pure logic: the editor's form <-> the API's job body, templates that fill the
// task table, status labels and which actions a status allows, the attach commands, and how
// live events change a job. No Vue, no fetch: everything here is unit-tested.
import type { Schemas } from '../../api/client'

export type Job = Schemas['Job']
export type JobTask = Schemas['JobTask']
export type JobParam = Schemas['JobParam']
export type JobBody = Schemas['JobCreateBody']
export type TaskBody = Schemas['Task']
export type ParamBody = Schemas['Param']

export type TemplateKind = '' | 'torchrun' | 'tf_config' | 'tf_cluster_spec'
export type Schedule = 'manual' | 'queued' | 'start_at' | 'reservation'

export const TEMPLATE_CHOICES: { value: TemplateKind; label: string }[] = [
  { value: '', label: 'None' },
  { value: 'torchrun', label: 'torchrun (PyTorch distributed)' },
  { value: 'tf_config', label: 'TF_CONFIG (TensorFlow 2)' },
  { value: 'tf_cluster_spec', label: 'TF cluster spec (TensorFlow 1)' },
]

export const ROLES = ['chief', 'worker', 'ps', 'evaluator'] as const

/** One row of the task table, as the form edits it. */
export interface TaskRow {
  key: number // stable v-for key
  host: string // '' = any host (the scheduler places it; queued jobs only)
  gpus: string[] // GPU uuids (or indices, as the API accepts both)
  gpuCount: number | null // "any N GPUs" when no GPU is ticked
  command: string
  cwd: string
  role: string
  params: string // one parameter a line: --name=value, --name value, --flag, or a positional
  env: string // one NAME=value a line
}

export interface JobForm {
  name: string
  description: string
  owner: string // admins: run as this user ('' = me)
  template: TemplateKind
  torchrunStyle: 'args' | 'env'
  nprocPerNode: number | null // null: one process per GPU of the task
  params: string
  env: string
  tasks: TaskRow[]
  schedule: Schedule
  startAt: string // <input type="datetime-local"> value
  reservationId: number | null
  stopAt: string
  maxRuntimeMin: number | null
  sharedGpus: boolean // its tasks may run on the same GPU
  handbackSignal: 'TERM' | 'USR1' | 'INT' // a queued job's signal before a reservation takes its GPUs
  handbackGraceS: number | null // null: the site's preempt_lead_s
  requeue: boolean // back to the queue after handing back
  onTimeLimit: 'tell' | 'stop' // past its longest run
}

let nextKey = 1
export function newRow(partial: Partial<TaskRow> = {}): TaskRow {
  return { key: nextKey++, host: '', gpus: [], gpuCount: null, command: '', cwd: '', role: 'worker', params: '', env: '', ...partial }
}

export function emptyForm(): JobForm {
  return {
    name: '',
    description: '',
    owner: '',
    template: '',
    torchrunStyle: 'args',
    nprocPerNode: null,
    params: '',
    env: '',
    tasks: [newRow()],
    schedule: 'manual',
    startAt: '',
    reservationId: null,
    stopAt: '',
    maxRuntimeMin: null,
    sharedGpus: false,
    handbackSignal: 'TERM',
    handbackGraceS: null,
    requeue: true,
    onTimeLimit: 'tell',
  }
}

// --- parameters and variables as text --------------------------------------------------------

/** A parameter as one line: `--lr=0.1`, `--lr 0.1`, `--flag`, or a positional `data.csv`. */
export function paramToLine(p: { name?: string; value?: string | null; separator?: string }): string {
  const name = p.name ?? ''
  const value = p.value ?? null
  if (!name) return value ?? ''
  if (value === null) return name
  return `${name}${p.separator === '=' ? '=' : ' '}${value}`
}

export function paramsToText(params: readonly JobParam[] | undefined): string {
  return (params ?? []).map(paramToLine).join('\n')
}

/** One line back to a parameter; a line not starting with "-" is a positional argument. */
export function lineToParam(line: string): ParamBody {
  const text = line.replace(/^\s+/, '')
  if (!text.startsWith('-')) return { name: '', value: text, separator: ' ' }
  const eq = text.indexOf('=')
  const sp = text.search(/\s/)
  if (eq > 0 && (sp < 0 || eq < sp)) return { name: text.slice(0, eq), value: text.slice(eq + 1), separator: '=' }
  if (sp > 0) return { name: text.slice(0, sp), value: text.slice(sp + 1), separator: ' ' }
  return { name: text, value: null, separator: ' ' }
}

export function textToParams(text: string): ParamBody[] {
  return text
    .split('\n')
    .map((l) => l.replace(/\r$/, ''))
    .filter((l) => l.trim() !== '')
    .map(lineToParam)
}

export function envToText(env: Record<string, string> | undefined): string {
  return Object.entries(env ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join('\n')
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/

/** `NAME=value` lines to a map; blank lines and `#` comments are skipped. */
export function textToEnv(text: string): { env: Record<string, string>; problems: string[] } {
  const env: Record<string, string> = {}
  const problems: string[] = []
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/\r$/, '')
    if (line.trim() === '' || line.trim().startsWith('#')) return
    const eq = line.indexOf('=')
    const name = (eq < 0 ? line : line.slice(0, eq)).trim()
    if (eq < 0) problems.push(`line ${i + 1}: "${name}" needs NAME=value`)
    else if (!ENV_NAME.test(name)) problems.push(`line ${i + 1}: "${name}" is not a variable name`)
    else env[name] = line.slice(eq + 1)
  })
  return { env, problems }
}

// --- form <-> API ----------------------------------------------------------------------------

/** The form as the API's job definition, with what is wrong in it (problems stop a save). */
export function formToBody(form: JobForm): { body: JobBody; problems: string[] } {
  const problems: string[] = []
  const envOf = (text: string, where: string) => {
    const { env, problems: p } = textToEnv(text)
    problems.push(...p.map((x) => `${where}: ${x}`))
    return env
  }
  const tasks: TaskBody[] = form.tasks.map((row, i) => {
    const task: TaskBody = {
      host: row.host || null,
      gpus: row.gpus.length ? [...row.gpus] : [],
      command: row.command,
      cwd: row.cwd,
      params: textToParams(row.params),
      env: envOf(row.env, `task ${i} variables`),
      role: row.role || 'worker',
      gpu_count: !row.gpus.length && row.gpuCount ? row.gpuCount : null,
    }
    if (!row.command.trim()) problems.push(`task ${i}: the command is empty`)
    if (!row.host && !task.gpu_count) problems.push(`task ${i}: pick a host, or a GPU count for the scheduler`)
    return task
  })
  const body: JobBody = {
    name: form.name.trim(),
    description: form.description,
    params: textToParams(form.params),
    env: envOf(form.env, 'job variables'),
    tasks,
    template: templateOf(form),
    queued: form.schedule === 'queued',
    start_at: form.schedule === 'start_at' && form.startAt ? new Date(form.startAt).toISOString() : null,
    reservation_id: form.schedule === 'reservation' ? form.reservationId : null,
    stop_at: form.stopAt ? new Date(form.stopAt).toISOString() : null,
    max_runtime_s: form.maxRuntimeMin ? form.maxRuntimeMin * 60 : null,
    shared_gpus: form.sharedGpus,
    handback_signal: form.handbackSignal,
    handback_grace_s: form.handbackGraceS ?? null,
    requeue: form.requeue,
    on_time_limit: form.onTimeLimit,
  }
  if (form.owner.trim()) body.owner = form.owner.trim()
  if (!body.name) problems.push('the job needs a name')
  if (!tasks.length) problems.push('the job needs at least one task')
  if (form.schedule === 'start_at' && !form.startAt) problems.push('pick when it starts')
  if (form.schedule === 'reservation' && !form.reservationId) problems.push('give the reservation number')
  return { body, problems }
}

function templateOf(form: JobForm): JobBody['template'] {
  if (!form.template) return null
  if (form.template !== 'torchrun') return { kind: form.template, options: {} }
  const options: Record<string, unknown> = { style: form.torchrunStyle }
  if (form.nprocPerNode) options.nproc_per_node = form.nprocPerNode
  return { kind: 'torchrun', options }
}

function localInput(iso: string | null | undefined): string {
  if (!iso) return ''
  const d = new Date(iso)
  const pad = (n: number) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`
}

/** A saved job (the owner's whole view) back to the form. */
export function jobToForm(job: Job): JobForm {
  const template = (job.template ?? null) as { kind?: string; options?: Record<string, unknown> } | string | null
  const kind = (typeof template === 'string' ? template : template?.kind ?? '') as TemplateKind
  const options = typeof template === 'object' && template ? template.options ?? {} : {}
  return {
    name: job.name,
    description: job.description ?? '',
    owner: '',
    template: kind,
    torchrunStyle: options.style === 'env' ? 'env' : 'args',
    nprocPerNode: typeof options.nproc_per_node === 'number' ? options.nproc_per_node : null,
    params: paramsToText(job.params),
    env: envToText(job.env),
    tasks: job.tasks.map((t) =>
      newRow({
        host: t.host ?? '',
        gpus: [...t.gpus],
        gpuCount: t.gpus.length ? null : (t.gpu_count ?? null),
        command: t.command ?? '',
        cwd: t.cwd ?? '',
        role: t.role ?? 'worker',
        params: paramsToText(t.params),
        env: envToText(t.env),
      }),
    ),
    schedule: job.queued ? 'queued' : job.reservation_id ? 'reservation' : job.start_at ? 'start_at' : 'manual',
    startAt: localInput(job.start_at),
    reservationId: job.reservation_id ?? null,
    stopAt: localInput(job.stop_at),
    maxRuntimeMin: job.max_runtime_s ? Math.round(job.max_runtime_s / 60) : null,
    sharedGpus: job.shared_gpus ?? false,
    handbackSignal: job.handback_signal === 'USR1' || job.handback_signal === 'INT' ? job.handback_signal : 'TERM',
    handbackGraceS: job.handback_grace_s ?? null,
    requeue: job.requeue ?? true,
    onTimeLimit: job.on_time_limit === 'stop' ? 'stop' : 'tell',
  }
}

// --- templates fill the table ----------------------------------------------------------------

export interface HostGpus {
  name: string
  gpus: { uuid: string; index: number; name?: string | null }[]
}

export interface FillOptions {
  nodes: number // torchrun: nodes; TensorFlow: chief + workers
  gpusPerNode: number
  ps: number // TensorFlow: parameter servers (no GPUs)
}

export const DEFAULT_COMMAND: Record<Exclude<TemplateKind, ''>, string> = {
  torchrun: 'train.py',
  tf_config: 'python3 train.py',
  tf_cluster_spec: 'python3 train.py',
}

/**
 * The task table a template needs: torchrun one worker per node; TF_CONFIG a chief then
 * workers, then parameter servers; TF1 cluster spec workers then parameter servers. Hosts are
 * the rows' own when set, else the hosts in turn; each node gets its host's first GPUs. The
 * first row's command, directory, parameters and variables are kept on every row.
 */
export function fillTemplate(
  kind: Exclude<TemplateKind, ''>,
  rows: readonly TaskRow[],
  hosts: readonly HostGpus[],
  opts: FillOptions,
): TaskRow[] {
  const first = rows[0]
  const command = first?.command.trim() ? first.command : DEFAULT_COMMAND[kind]
  const common = { command, cwd: first?.cwd ?? '', params: first?.params ?? '', env: first?.env ?? '' }
  const nodes = Math.max(1, Math.floor(opts.nodes))
  const hostAt = (i: number) => rows[i]?.host || hosts[i % Math.max(1, hosts.length)]?.name || ''
  // Each node takes the next GPUs of its host: two nodes on one host never share a GPU.
  const taken = new Map<string, number>()
  const gpusOf = (host: string, n: number) => {
    const from = taken.get(host) ?? 0
    const count = Math.max(0, n)
    taken.set(host, from + count)
    return (hosts.find((h) => h.name === host)?.gpus ?? [])
      .slice()
      .sort((a, b) => a.index - b.index)
      .slice(from, from + count)
      .map((g) => g.uuid)
  }
  const out: TaskRow[] = []
  for (let i = 0; i < nodes; i++) {
    const host = hostAt(i)
    const role = kind === 'tf_config' && i === 0 ? 'chief' : 'worker'
    out.push(newRow({ ...common, host, gpus: gpusOf(host, opts.gpusPerNode), role }))
  }
  if (kind !== 'torchrun') {
    for (let j = 0; j < Math.max(0, Math.floor(opts.ps)); j++) {
      out.push(newRow({ ...common, host: hostAt(nodes + j) || hostAt(0), gpus: [], role: 'ps' }))
    }
  }
  return out
}

// --- status ----------------------------------------------------------------------------------

export const JOB_STATUSES = [
  'pending', 'scheduled', 'queued', 'starting', 'running', 'stopping', 'succeeded', 'failed', 'stopped', 'lost',
] as const

const ACTIVE = new Set(['starting', 'running', 'stopping', 'lost'])

/** The badge class of a job's or task's status. */
export function statusClass(status: string): 'ok' | 'warn' | 'danger' | 'muted' {
  if (status === 'running' || status === 'succeeded') return 'ok'
  if (status === 'failed' || status === 'lost') return 'danger'
  if (status === 'starting' || status === 'stopping' || status === 'queued' || status === 'scheduled') return 'warn'
  return 'muted'
}

/** How often a running task's log is read, and the longest wait while reads fail. */
export const LOG_REFRESH_MS = 2000
export const LOG_REFRESH_MAX_MS = 60_000

/** The wait before the next read of a log: back to 2 s after a read that worked, doubled
 * (up to a minute) after one that failed, so a host that is down is not asked every 2 s. */
export function nextLogDelay(delayMs: number, failed: boolean): number {
  return failed ? Math.min(LOG_REFRESH_MAX_MS, Math.max(LOG_REFRESH_MS, delayMs) * 2) : LOG_REFRESH_MS
}

export function isActive(status: string): boolean {
  return ACTIVE.has(status)
}

export interface Allowed {
  start: boolean
  stop: boolean
  enqueue: boolean
  dequeue: boolean
  edit: boolean
  delete: boolean
}

/** What the owner (or an admin) may do to a job now; nothing for anyone else. */
export function allowedActions(job: Pick<Job, 'status' | 'queued' | 'owner'>, user: string | undefined, admin: boolean): Allowed {
  const mine = admin || (!!user && job.owner === user)
  const active = isActive(job.status)
  const waiting = job.status === 'queued' || job.status === 'scheduled'
  return {
    start: mine && !active,
    stop: mine && (active || waiting || (job.queued && !active)),
    enqueue: mine && !active && !job.queued,
    dequeue: mine && !active && job.queued,
    edit: mine && !active,
    delete: mine && !active,
  }
}

// --- attaching -------------------------------------------------------------------------------

/** What to type to watch a task's terminal: on the host, or from here through ssh. */
export function attachCommands(host: string | null | undefined, session: string): { screen: string; tmux: string; ssh: string } {
  const screen = `screen -x ${session}`
  const tmux = `tmux attach -t ${session}`
  return { screen, tmux, ssh: host ? `ssh -t ${host} ${screen}` : screen }
}

// --- live events -----------------------------------------------------------------------------

type TaskData = Partial<JobTask> & { index: number }

/** A job after a job.* event: the event's public fields over ours (commands and variables,
 * which events never carry, are kept). */
export function mergeJobEvent(job: Job, data: Record<string, unknown>): Job {
  const { actor: _a, changed: _c, previous_status: _p, tasks, template, ...rest } = data as Record<string, unknown> & {
    tasks?: TaskData[]
  }
  void _a
  void _c
  void _p
  const merged: Job = { ...job, ...(rest as Partial<Job>) }
  // An event names only the template's kind; keep the options we know when it is the same.
  const ours = job.template as { kind?: string } | string | null | undefined
  const ourKind = typeof ours === 'string' ? ours : ours?.kind ?? null
  if (template !== undefined && template !== ourKind) merged.template = template
  if (Array.isArray(tasks)) {
    merged.tasks = tasks.map((t) => ({ ...(job.tasks.find((o) => o.index === t.index) ?? {}), ...t }) as JobTask)
  }
  return merged
}

/** A job after a task.status_changed event. */
export function mergeTaskEvent(job: Job, task: TaskData): Job {
  return { ...job, tasks: job.tasks.map((t) => (t.index === task.index ? ({ ...t, ...task } as JobTask) : t)) }
}

/** Shell quoting for showing variables as `export NAME='value'`. */
export function shellQuote(value: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`
}

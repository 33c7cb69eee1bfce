import { describe, expect, it } from 'vitest'
import {
  allowedActions,
  attachCommands,
  emptyForm,
  fillTemplate,
  formToBody,
  jobToForm,
  lineToParam,
  mergeJobEvent,
  mergeTaskEvent,
  newRow,
  paramToLine,
  paramsToText,
  shellQuote,
  statusClass,
  textToEnv,
  textToParams,
  type HostGpus,
  type Job,
} from './jobModel'

const hosts: HostGpus[] = ['sim-001', 'sim-002', 'sim-003'].map((name, h) => ({
  name,
  gpus: [3, 0, 2, 1].map((index) => ({ uuid: `GPU-${h}-${index}`, index })),
}))

describe('parameters as lines', () => {
  it('reads the three forms and positionals', () => {
    expect(lineToParam('--lr=0.1')).toEqual({ name: '--lr', value: '0.1', separator: '=' })
    expect(lineToParam('--epochs 3')).toEqual({ name: '--epochs', value: '3', separator: ' ' })
    expect(lineToParam('--fp16')).toEqual({ name: '--fp16', value: null, separator: ' ' })
    expect(lineToParam('data.csv')).toEqual({ name: '', value: 'data.csv', separator: ' ' })
    expect(lineToParam('--msg hello = world')).toEqual({ name: '--msg', value: 'hello = world', separator: ' ' })
    expect(lineToParam('--x=')).toEqual({ name: '--x', value: '', separator: '=' })
  })

  it('round-trips, skipping blank lines', () => {
    const text = '--lr=0.1\n\n--epochs 3\n--fp16\nmy file.txt\n--note it\'s "quoted" $HOME'
    const params = textToParams(text)
    expect(params).toHaveLength(5)
    expect(paramsToText(params as never)).toBe(text.replace('\n\n', '\n'))
    expect(paramToLine({ name: '', value: 'x y' })).toBe('x y')
  })
})

describe('variables as lines', () => {
  it('reads NAME=value, keeps = and spaces in values, reports bad lines', () => {
    const { env, problems } = textToEnv('A=1\n# comment\nB= x=y \n\nbad line\n1X=2')
    expect(env).toEqual({ A: '1', B: ' x=y ' })
    expect(problems).toHaveLength(2)
    expect(problems[0]).toContain('line 5')
  })
})

describe('form <-> API body', () => {
  it('turns the table into the job definition', () => {
    const form = emptyForm()
    form.name = ' resnet '
    form.params = '--epochs=90'
    form.env = 'WANDB_MODE=offline'
    form.template = 'torchrun'
    form.torchrunStyle = 'env'
    form.tasks = [
      newRow({ host: 'sim-001', gpus: ['GPU-0-0', 'GPU-0-1'], command: 'python train.py', params: '--rank 0', env: 'NCCL_DEBUG=INFO' }),
      newRow({ host: '', gpuCount: 2, command: 'python train.py' }),
    ]
    form.schedule = 'queued'
    form.maxRuntimeMin = 90
    const { body, problems } = formToBody(form)
    expect(problems).toEqual([])
    expect(body.name).toBe('resnet')
    expect(body.queued).toBe(true)
    expect(body.max_runtime_s).toBe(5400)
    expect(body.shared_gpus).toBe(false)
    expect(body).toMatchObject({ handback_signal: 'TERM', handback_grace_s: null, requeue: true, on_time_limit: 'tell' })
    expect(body.template).toEqual({ kind: 'torchrun', options: { style: 'env' } })
    expect(body.params).toEqual([{ name: '--epochs', value: '90', separator: '=' }])
    expect(body.env).toEqual({ WANDB_MODE: 'offline' })
    expect(body.tasks[0]).toMatchObject({ host: 'sim-001', gpus: ['GPU-0-0', 'GPU-0-1'], gpu_count: null, env: { NCCL_DEBUG: 'INFO' } })
    expect(body.tasks[0].params).toEqual([{ name: '--rank', value: '0', separator: ' ' }])
    expect(body.tasks[1]).toMatchObject({ host: null, gpus: [], gpu_count: 2 })
    expect(body.owner).toBeUndefined()
  })

  it('says what stops a save', () => {
    const form = emptyForm()
    form.tasks[0].env = 'oops'
    const { problems } = formToBody(form)
    expect(problems.join('\n')).toMatch(/name/)
    expect(problems.join('\n')).toMatch(/command is empty/)
    expect(problems.join('\n')).toMatch(/pick a host/)
    expect(problems.join('\n')).toMatch(/task 0 variables/)
  })

  it('reads a saved job back', () => {
    const job = {
      id: 7, name: 'tf', owner: 'alice', status: 'pending', queued: false, created_at: '', updated_at: '',
      description: 'd', params: [{ name: '--steps', value: '10', separator: '=' }], env: { A: '1' },
      template: { kind: 'torchrun', options: { style: 'args', nproc_per_node: 4 } },
      reservation_id: 12, max_runtime_s: 600, handback_signal: 'USR1', handback_grace_s: 90, requeue: false, on_time_limit: 'stop',
      tasks: [{ index: 0, host: 'sim-002', gpus: ['GPU-1-0'], session: 'warden-7-0', status: 'pending', command: 'x.py', cwd: '~/a', role: 'worker', params: [], env: { B: '2' } }],
    } as unknown as Job
    const form = jobToForm(job)
    expect(form).toMatchObject({ name: 'tf', template: 'torchrun', torchrunStyle: 'args', nprocPerNode: 4, params: '--steps=10', env: 'A=1', schedule: 'reservation', reservationId: 12, maxRuntimeMin: 10 })
    expect(form.tasks[0]).toMatchObject({ host: 'sim-002', gpus: ['GPU-1-0'], command: 'x.py', cwd: '~/a', env: 'B=2' })
    const { body } = formToBody(form)
    expect(body.template).toEqual({ kind: 'torchrun', options: { style: 'args', nproc_per_node: 4 } })
    expect(body.reservation_id).toBe(12)
    expect(body).toMatchObject({ handback_signal: 'USR1', handback_grace_s: 90, requeue: false, on_time_limit: 'stop' })
  })
})

describe('templates fill the table', () => {
  it('torchrun: one worker per node on the hosts in turn, their first GPUs, the command kept', () => {
    const rows = fillTemplate('torchrun', [newRow({ command: 'train.py --x', cwd: '~/r' })], hosts, { nodes: 2, gpusPerNode: 2, ps: 1 })
    expect(rows).toHaveLength(2)
    expect(rows.map((r) => r.host)).toEqual(['sim-001', 'sim-002'])
    expect(rows[0].gpus).toEqual(['GPU-0-0', 'GPU-0-1'])
    expect(rows[1].gpus).toEqual(['GPU-1-0', 'GPU-1-1'])
    expect(rows.every((r) => r.command === 'train.py --x' && r.cwd === '~/r' && r.role === 'worker')).toBe(true)
  })

  it('torchrun on one host: each node gets GPUs of its own', () => {
    const one = hosts.slice(0, 1)
    const rows = fillTemplate('torchrun', [newRow()], one, { nodes: 2, gpusPerNode: 1, ps: 0 })
    expect(rows.map((r) => [r.host, r.gpus])).toEqual([['sim-001', ['GPU-0-0']], ['sim-001', ['GPU-0-1']]])
    const wide = fillTemplate('torchrun', [newRow()], one, { nodes: 2, gpusPerNode: 2, ps: 0 })
    expect(wide.map((r) => r.gpus)).toEqual([['GPU-0-0', 'GPU-0-1'], ['GPU-0-2', 'GPU-0-3']])
  })

  it('an empty command gets an example; hosts already chosen are kept', () => {
    const rows = fillTemplate('torchrun', [newRow({ host: 'sim-003' })], hosts, { nodes: 3, gpusPerNode: 1, ps: 0 })
    expect(rows[0].command).toBe('train.py')
    expect(rows.map((r) => r.host)).toEqual(['sim-003', 'sim-002', 'sim-003'])
    expect(rows.map((r) => r.gpus)).toEqual([['GPU-2-0'], ['GPU-1-0'], ['GPU-2-1']])
  })

  it('TF_CONFIG: a chief, workers and parameter servers without GPUs', () => {
    const rows = fillTemplate('tf_config', [newRow()], hosts, { nodes: 3, gpusPerNode: 1, ps: 1 })
    expect(rows.map((r) => r.role)).toEqual(['chief', 'worker', 'worker', 'ps'])
    expect(rows[3].gpus).toEqual([])
    expect(rows[0].command).toBe('python3 train.py')
  })

  it('TF cluster spec: workers and ps only', () => {
    const rows = fillTemplate('tf_cluster_spec', [], hosts, { nodes: 2, gpusPerNode: 0, ps: 2 })
    expect(rows.map((r) => r.role)).toEqual(['worker', 'worker', 'ps', 'ps'])
    expect(rows[0].gpus).toEqual([])
  })
})

describe('status and actions', () => {
  it('labels', () => {
    expect(statusClass('running')).toBe('ok')
    expect(statusClass('succeeded')).toBe('ok')
    expect(statusClass('failed')).toBe('danger')
    expect(statusClass('lost')).toBe('danger')
    expect(statusClass('queued')).toBe('warn')
    expect(statusClass('stopped')).toBe('muted')
    expect(statusClass('pending')).toBe('muted')
  })

  it('what the owner may do', () => {
    const a = (status: string, queued = false, owner = 'alice') => allowedActions({ status, queued, owner }, 'alice', false)
    expect(a('pending')).toEqual({ start: true, stop: false, enqueue: true, dequeue: false, edit: true, delete: true })
    expect(a('running')).toEqual({ start: false, stop: true, enqueue: false, dequeue: false, edit: false, delete: false })
    expect(a('queued', true)).toMatchObject({ start: true, stop: true, enqueue: false, dequeue: true })
    expect(a('scheduled')).toMatchObject({ stop: true, start: true })
    expect(a('running', true)).toMatchObject({ dequeue: false, stop: true })
    expect(Object.values(a('pending', false, 'bob')).some(Boolean)).toBe(false)
    expect(allowedActions({ status: 'pending', queued: false, owner: 'bob' }, 'admin', true).start).toBe(true)
  })

  it('attach commands', () => {
    expect(attachCommands('sim-001', 'warden-12-0')).toEqual({
      screen: 'screen -x warden-12-0',
      tmux: 'tmux attach -t warden-12-0',
      ssh: 'ssh -t sim-001 screen -x warden-12-0',
    })
    expect(attachCommands(null, 'warden-1-0').ssh).toBe('screen -x warden-1-0')
  })

  it('shell quoting', () => {
    expect(shellQuote('abc/1.2')).toBe('abc/1.2')
    expect(shellQuote('a b')).toBe("'a b'")
    expect(shellQuote("it's")).toBe("'it'\\''s'")
    expect(shellQuote('{"a":1}')).toBe(`'{"a":1}'`)
  })
})

describe('live events', () => {
  const job = {
    id: 3, name: 'j', owner: 'alice', status: 'pending', queued: false, created_at: '', updated_at: '',
    template: { kind: 'torchrun', options: { style: 'env' } },
    tasks: [
      { index: 0, host: 'sim-001', gpus: [], session: 'warden-3-0', status: 'pending', command: 'a.py', env: { A: '1' } },
      { index: 1, host: 'sim-002', gpus: [], session: 'warden-3-1', status: 'pending', command: 'a.py' },
    ],
  } as unknown as Job

  it('a job event updates the status and tasks, keeping commands and template options', () => {
    const next = mergeJobEvent(job, {
      id: 3, status: 'running', actor: 'alice', previous_status: 'pending', template: 'torchrun',
      tasks: [
        { index: 0, host: 'sim-001', gpus: [], session: 'warden-3-0', status: 'running' },
        { index: 1, host: 'sim-002', gpus: [], session: 'warden-3-1', status: 'starting' },
      ],
    })
    expect(next.status).toBe('running')
    expect(next.template).toEqual({ kind: 'torchrun', options: { style: 'env' } })
    expect(next.tasks[0]).toMatchObject({ status: 'running', command: 'a.py', env: { A: '1' } })
    expect(next.tasks[1].status).toBe('starting')
    expect('actor' in next).toBe(false)
  })

  it('a task event updates that task only', () => {
    const next = mergeTaskEvent(job, { index: 1, status: 'failed', exit_code: 2 })
    expect(next.tasks[1]).toMatchObject({ status: 'failed', exit_code: 2, command: 'a.py' })
    expect(next.tasks[0].status).toBe('pending')
    expect(job.tasks[1].status).toBe('pending')
  })
})

import { describe, expect, it } from 'vitest'
import {
  daysText,
  emptyForm,
  formToBody,
  hoursText,
  overnight,
  ruleSentence,
  ruleState,
  ruleToForm,
  timeZones,
  validateForm,
  windowProblem,
  windowText,
  type Rule,
} from './rules'

const rule: Rule = {
  id: 7,
  name: 'ml weekdays',
  description: 'lab hours',
  users: [],
  groups: ['ml'],
  all_gpus: false,
  hosts: ['sim-001'],
  gpus: [],
  labels: [],
  valid_from: '2020-01-01T00:00:00+00:00',
  valid_until: null,
  windows: [{ days: [0, 1, 2, 3, 4], start: '08:00', end: '18:00' }],
  timezone: 'Europe/Warsaw',
  max_gpus: 4,
  max_duration_s: 8 * 3600,
  max_gpu_hours_per_week: null,
  idle_policy: null,
}

describe('rule sentence', () => {
  it('reads like the issue asks', () => {
    expect(ruleSentence(rule)).toBe('group ml: GPUs of sim-001, Mon–Fri 08:00–18:00 Europe/Warsaw, max 4 GPUs, 8 h per reservation')
  })
  it('names GPUs by host:index and says any time without windows', () => {
    const r = { ...rule, hosts: [], gpus: ['GPU-a', 'GPU-b'], users: ['alice'], groups: [], windows: [], max_gpus: null, max_duration_s: null, max_gpu_hours_per_week: 100 }
    expect(ruleSentence(r, { 'GPU-a': 'sim-002:0' })).toBe('user alice: GPUs sim-002:0, GPU-b, any time, 100 GPU-h per week')
  })
  it('shows future and ending validity', () => {
    const now = new Date('2026-01-01T00:00:00Z')
    const r = { ...rule, all_gpus: true, windows: [], valid_from: '2026-03-01T12:00:00Z', valid_until: '2026-06-01T12:00:00Z', max_gpus: null, max_duration_s: null }
    const s = ruleSentence(r, {}, now)
    expect(s).toMatch(/^group ml: every GPU, any time, from .*2026, until .*2026$/)
    expect(ruleState(r, now)).toBe('future')
    expect(ruleState(r, new Date('2026-04-01Z'))).toBe('active')
    expect(ruleState(r, new Date('2026-07-01Z'))).toBe('expired')
  })
})

describe('weekly windows', () => {
  it('compresses days into ranges', () => {
    expect(daysText([4, 0, 1, 2, 3])).toBe('Mon–Fri')
    expect(daysText([0, 2, 4])).toBe('Mon, Wed, Fri')
    expect(daysText([5, 6])).toBe('Sat, Sun')
    expect(daysText([0, 1, 2, 5])).toBe('Mon–Wed, Sat')
    expect(daysText([0, 1, 2, 3, 4, 5, 6])).toBe('every day')
  })
  it('marks overnight windows and whole days', () => {
    expect(windowText({ days: [4], start: '22:00', end: '06:00' })).toBe('Fri 22:00–06:00 (overnight)')
    expect(windowText({ days: [5, 6], start: '00:00', end: '00:00' })).toBe('Sat, Sun all day')
    expect(overnight({ days: [0], start: '08:00', end: '18:00' })).toBe(false)
    expect(overnight({ days: [0], start: '08:00', end: '08:00' })).toBe(true)
    expect(overnight({ days: [0], start: '08:00', end: '24:00' })).toBe(false)
  })
  it('validates days and times', () => {
    expect(windowProblem({ days: [], start: '08:00', end: '18:00' })).toMatch(/day/)
    expect(windowProblem({ days: [0], start: '8:00', end: '18:00' })).toMatch(/start/)
    expect(windowProblem({ days: [0], start: '08:00', end: '25:00' })).toMatch(/end/)
    expect(windowProblem({ days: [0], start: '08:00', end: '24:00' })).toBeNull()
  })
})

describe('rule form and API body', () => {
  it('round-trips a rule', () => {
    const form = ruleToForm(rule)
    expect(form.maxDurationHours).toBe('8')
    expect(form.maxGpus).toBe('4')
    expect(form.validUntil).toBe('')
    const body = formToBody(form)
    expect(body).toMatchObject({
      name: 'ml weekdays',
      groups: ['ml'],
      users: [],
      all_gpus: false,
      hosts: ['sim-001'],
      timezone: 'Europe/Warsaw',
      windows: [{ days: [0, 1, 2, 3, 4], start: '08:00', end: '18:00' }],
      max_gpus: 4,
      max_duration_s: 28800,
      max_gpu_hours_per_week: null,
      idle_policy: null,
      valid_until: null,
    })
    expect(new Date(body.valid_from!).getTime()).toBe(new Date(rule.valid_from).getTime())
  })
  it('sends empty limits as null, fractional hours as seconds, and no objects with every GPU', () => {
    const form = { ...emptyForm('UTC'), name: ' x ', groups: ['users'], allGpus: true, hosts: ['h'], maxDurationHours: '1.5', maxGpuHoursPerWeek: ' ' }
    const body = formToBody(form)
    expect(body.name).toBe('x')
    expect(body.hosts).toEqual([])
    expect(body.max_duration_s).toBe(5400)
    expect(body.max_gpu_hours_per_week).toBeNull()
    expect(body.max_gpus).toBeNull()
    expect(body.valid_from).toBeNull()
  })
  it('takes numbers from number inputs', () => {
    const form = { ...emptyForm(), maxGpus: 3 as unknown as string, maxDurationHours: 2 as unknown as string }
    expect(formToBody(form)).toMatchObject({ max_gpus: 3, max_duration_s: 7200 })
    expect(validateForm({ ...form, name: 'n', users: ['a'], allGpus: true })).toEqual({})
  })
  it('sorts window days', () => {
    const form = { ...emptyForm(), windows: [{ days: [4, 0], start: '08:00', end: '10:00' }] }
    expect(formToBody(form).windows![0].days).toEqual([0, 4])
  })
  it('reports what the form lacks', () => {
    const problems = validateForm(emptyForm())
    expect(Object.keys(problems).sort()).toEqual(['name', 'objects', 'subjects'])
    const bad = {
      ...emptyForm(),
      name: 'n',
      users: ['a'],
      allGpus: true,
      validFrom: '2026-05-02T10:00',
      validUntil: '2026-05-01T10:00',
      windows: [{ days: [], start: '08:00', end: '10:00' }],
      maxGpus: '1.5',
      maxDurationHours: '0',
      maxGpuHoursPerWeek: '-1',
    }
    expect(Object.keys(validateForm(bad)).sort()).toEqual(['maxDurationHours', 'maxGpuHoursPerWeek', 'maxGpus', 'validUntil', 'windows'])
    expect(validateForm({ ...bad, validUntil: '', windows: [], maxGpus: '2', maxDurationHours: '0.5', maxGpuHoursPerWeek: '' })).toEqual({})
  })
})

describe('helpers', () => {
  it('reads durations', () => {
    expect(hoursText(1800)).toBe('30 min')
    expect(hoursText(8 * 3600)).toBe('8 h')
    expect(hoursText(5400)).toBe('1.5 h')
    expect(hoursText(2 * 86400)).toBe('2 d')
  })
  it('lists time zones with UTC first', () => {
    const zones = timeZones()
    expect(zones[0]).toBe('UTC')
    expect(zones).toContain('Europe/Warsaw')
    expect(zones.filter((z) => z === 'UTC')).toHaveLength(1)
  })
})

describe('idle policy', () => {
  const policy = { below_util_percent: 5, below_memory_mib: 1024, for_minutes: 60, grace_minutes: 30, snooze_minutes: 120 }
  it('is off by default, with the example values ready', () => {
    const form = emptyForm()
    expect(form.idleOn).toBe(false)
    expect(formToBody({ ...form, name: 'x' }).idle_policy).toBeNull()
    expect(formToBody({ ...form, idleOn: true }).idle_policy).toEqual(policy)
  })
  it('goes to the form and back, and reads in the sentence', () => {
    const withIdle = { ...rule, idle_policy: { ...policy, for_minutes: 0.5 } }
    const form = ruleToForm(withIdle)
    expect(form.idleOn).toBe(true)
    expect(formToBody(form).idle_policy).toEqual({ ...policy, for_minutes: 0.5 })
    expect(ruleSentence(withIdle)).toContain('idle (< 5 %, < 1024 MiB for 0.5 min) released after 30 min without an answer')
  })
  it('refuses empty or non-positive values only when on', () => {
    expect(validateForm({ ...emptyForm(), idleGrace: '0' }).idleGrace).toBeUndefined()
    const problems = validateForm({ ...emptyForm(), idleOn: true, idleGrace: '0', idleUtil: '150', idleFor: '' })
    expect(problems).toMatchObject({ idleGrace: 'more than zero', idleUtil: 'at most 100 %', idleFor: 'more than zero' })
  })
})

describe('rules by GPU label', () => {
  it('says the labels in the sentence and sends them as terms', () => {
    const r = { ...rule, hosts: [], labels: ['model=A100-80GB'], windows: [], max_gpus: null, max_duration_s: null }
    expect(ruleSentence(r)).toBe('group ml: every GPU labelled model=A100-80GB, any time')
    const onHost = { ...r, hosts: ['sim-001'], labels: ['arch=ampere', 'memory!=40GB'] }
    expect(ruleSentence(onHost)).toBe('group ml: GPUs of sim-001 labelled arch=ampere, memory!=40GB, any time')
    const form = ruleToForm(onHost)
    expect(form.labels).toBe('arch=ampere, memory!=40GB')
    expect(formToBody({ ...form, labels: ' model=H200,arch=hopper  ' }).labels).toEqual(['model=H200', 'arch=hopper'])
  })
  it('accepts labels as the only objects and names a bad term', () => {
    const form = { ...emptyForm(), name: 'vision', groups: ['vision'], labels: 'model=A100-80GB' }
    expect(validateForm(form)).toEqual({})
    expect(validateForm({ ...form, labels: '' }).objects).toMatch(/labels/)
    expect(validateForm({ ...form, labels: 'gpu=A100' }).labels).toBe('gpu=A100: the label keys are model, memory, arch')
    expect(validateForm({ ...form, labels: 'A100' }).labels).toMatch(/write key=value/)
  })
})

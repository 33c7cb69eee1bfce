import { describe, expect, it } from 'vitest'
import { dateTime, duration, gpuName, gpuOrder, mib, minutesOfDay, percent, plural, splitGpus, timeOfDay, toLocalInput, when } from './format'

describe('format', () => {
  it('shows a missing figure as a dash, never 0', () => {
    expect(percent(null)).toBe('—')
    expect(mib(undefined)).toBe('—')
    expect(percent(0)).toBe('0%')
  })
  it('switches to GiB at 1024 MiB', () => {
    expect(mib(512)).toBe('512 MiB')
    expect(mib(40960)).toBe('40.0 GiB')
  })
  it('reads durations', () => {
    expect(duration(42)).toBe('42 s')
    expect(duration(3 * 3600 + 5 * 60)).toBe('3 h 05 min')
    expect(duration(3 * 86400 + 4 * 3600)).toBe('3 d 4 h')
  })
  it('shows only the time for today', () => {
    const now = new Date(2026, 10, 21, 15, 0)
    expect(when(new Date(2026, 10, 21, 9, 30).toISOString(), now)).toMatch(/09.30/)
    expect(toLocalInput(new Date(2026, 0, 2, 3, 4))).toBe('2026-01-02T03:04')
  })
})

describe('one way of writing times, the browser locale\'s, everywhere', () => {
  it('writes 09:30 alike on the calendar\'s axis, in a list and in a whole date', () => {
    const now = new Date()
    const t = new Date(now.getFullYear(), now.getMonth(), now.getDate(), 9, 30)
    const expected = t.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' })
    expect(minutesOfDay(570)).toBe(expected)
    expect(timeOfDay(t)).toBe(expected)
    expect(when(t.toISOString(), now)).toBe(expected)
    expect(dateTime(t)).toContain(expected)
    expect(dateTime(t)).not.toMatch(/:\d\d:\d\d/) // no seconds
  })
})

describe('counts', () => {
  it('says "1 host" and "2 hosts"', () => {
    expect(`1 ${plural(1, 'host')}, 2 ${plural(2, 'host')}, 0 ${plural(0, 'GPU')}`).toBe('1 host, 2 hosts, 0 GPUs')
  })
})

describe('MIG instances', () => {
  it('names an instance under its GPU and sorts it right after it', () => {
    expect(gpuName(3)).toBe('GPU 3')
    expect(gpuName(1001)).toBe('GPU 0/mig1')
    expect(gpuName(null)).toBe('GPU')
    const order = [1000, 1, 2000, 0, 1001].sort((a, b) => gpuOrder(a) - gpuOrder(b))
    expect(order).toEqual([0, 1000, 1001, 1, 2000])
    expect([...splitGpus([0, 1, 1000, 1001, 3002])]).toEqual([0, 2])
  })
})

import { describe, expect, it } from 'vitest'
import { memoryText, powerText } from './display'

describe('memoryText', () => {
  const m = (used: number | null, total: number | null) => memoryText({ memory_used_mib: used, memory_total_mib: total })

  it('says a shared unit once, so a full 80 GiB GPU fits a narrow card', () => {
    expect(m(81920, 81920)).toBe('80.0 / 80.0 GiB')
    expect(m(17817, 81920)).toBe('17.4 / 80.0 GiB')
    expect(m(4, 512)).toBe('4 / 512 MiB')
  })

  it('keeps both units when they differ, and a dash for what is not reported', () => {
    expect(m(4, 81920)).toBe('4 MiB / 80.0 GiB')
    expect(m(null, 81920)).toBe('— / 80.0 GiB')
    expect(m(null, null)).toBe('—')
  })
})

describe('powerText', () => {
  it('says the unit once', () => {
    expect(powerText(147.6, 400)).toBe('148 / 400 W')
    expect(powerText(null, 400)).toBe('— / 400 W')
    expect(powerText(58, null)).toBe('58 W')
    expect(powerText(null, null)).toBe('—')
  })
})

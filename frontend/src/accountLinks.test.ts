import { describe, expect, it } from 'vitest'
import { endsMySession, mustChoosePassword, newPasswordProblems, passwordLinkUrl } from './accountLinks'

describe('passwordLinkUrl', () => {
  it('is the password page at this address, the token escaped', () => {
    expect(passwordLinkUrl('https://warden.lab/', 'a/b c')).toBe('https://warden.lab/password/a%2Fb%20c')
  })
})

describe('newPasswordProblems', () => {
  it('wants 8 characters, then the same twice', () => {
    expect(newPasswordProblems('short', 'short')).toHaveProperty('password')
    expect(newPasswordProblems('long-enough', 'long-enougH')).toEqual({ repeat: 'The two passwords differ.' })
    expect(newPasswordProblems('long-enough', 'long-enough')).toEqual({})
  })
})

describe('mustChoosePassword', () => {
  it('only when the server says an admin chose it', () => {
    expect(mustChoosePassword({ change_at_sign_in: true })).toBe(true)
    expect(mustChoosePassword({ change_at_sign_in: false })).toBe(false)
    expect(mustChoosePassword({})).toBe(false)
    expect(mustChoosePassword(null)).toBe(false)
  })
})

describe('endsMySession', () => {
  it('is a status change or the deletion of my own account', () => {
    expect(endsMySession('ann', 'user.updated', { username: 'ann', changed: ['status'] })).toBe(true)
    expect(endsMySession('ann', 'user.deleted', { username: 'ann' })).toBe(true)
    expect(endsMySession('ann', 'user.updated', { username: 'ann', changed: ['email'] })).toBe(false)
    expect(endsMySession('ann', 'user.updated', { username: 'bob', changed: ['status'] })).toBe(false)
    expect(endsMySession('ann', 'user.deleted', { username: 'bob' })).toBe(false)
    expect(endsMySession(undefined, 'user.updated', { username: 'ann', changed: ['status'] })).toBe(false)
  })
})

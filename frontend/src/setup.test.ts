import { describe, expect, it } from 'vitest'
import { setupBody, setupProblems, tokenOf } from './setup'

const good = { username: 'root1', password: 'long enough', repeat: 'long enough', email: '' }

describe('the set-up form', () => {
  it('takes the token of the link, first of repeated ones, and nothing else', () => {
    expect(tokenOf({ token: 'abc_-1' })).toBe('abc_-1')
    expect(tokenOf({ token: ['first', 'second'] })).toBe('first')
    expect(tokenOf({})).toBe('')
    expect(tokenOf({ token: null })).toBe('')
  })
  it('accepts a complete form, with or without an e-mail', () => {
    expect(setupProblems(good)).toEqual({})
    expect(setupProblems({ ...good, email: 'me@lab.example.org' })).toEqual({})
  })
  it('names each field a person must fix', () => {
    expect(Object.keys(setupProblems({ ...good, username: ' ' }))).toEqual(['username'])
    expect(setupProblems({ ...good, password: 'short', repeat: 'short' }).password).toMatch(/at least 8/)
    expect(setupProblems({ ...good, repeat: 'long enougH' }).repeat).toMatch(/differ/)
    expect(Object.keys(setupProblems({ ...good, email: 'not an address' }))).toEqual(['email'])
  })
  it('leaves an empty e-mail out of the request (the server picks USERNAME@localhost)', () => {
    expect(setupBody({ ...good, username: ' root1 ' }, 't')).toEqual({ token: 't', username: 'root1', password: 'long enough' })
    expect(setupBody({ ...good, email: 'a@b.org' }, 't').email).toBe('a@b.org')
  })
})

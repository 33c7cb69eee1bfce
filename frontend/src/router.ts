// The pages and who may open them. Each page is its own chunk, loaded when first visited.
import { createRouter, createWebHistory, type RouteRecordRaw } from 'vue-router'
import { session } from './session'
import { mustChoosePassword } from './accountLinks'

const routes: RouteRecordRaw[] = [
  { path: '/login', name: 'login', component: () => import('./pages/LoginPage.vue'), meta: { public: true, title: 'Sign in' } },
  { path: '/signup', name: 'signup', component: () => import('./pages/SignupPage.vue'), meta: { public: true, title: 'Sign up' } },
  { path: '/idle/:token', name: 'idle-link', component: () => import('./pages/idle/IdleLinkPage.vue'), meta: { public: true, title: 'Idle reservation' } },
  { path: '/password/:token', name: 'password-link', component: () => import('./pages/PasswordLinkPage.vue'), meta: { public: true, title: 'Choose a password' } },
  { path: '/setup', name: 'setup', component: () => import('./pages/SetupPage.vue'), meta: { public: true, title: 'Set up' } },
  { path: '/', name: 'dashboard', component: () => import('./pages/dashboard/DashboardPage.vue'), meta: { title: 'Dashboard' } },
  { path: '/reservations', name: 'calendar', component: () => import('./pages/reservations/CalendarPage.vue'), meta: { title: 'Calendar' } },
  { path: '/reservations/overview', name: 'overview', component: () => import('./pages/reservations/OverviewPage.vue'), meta: { title: 'Overview' } },
  { path: '/reservations/find', name: 'find-slot', component: () => import('./pages/reservations/FindSlotPage.vue'), meta: { title: 'Find GPUs' } },
  { path: '/reservations/:id(\\d+)', name: 'reservation', component: () => import('./pages/reservations/ReservationPage.vue'), props: true, meta: { title: 'Reservation' } },
  { path: '/jobs', name: 'jobs', component: () => import('./pages/jobs/JobsPage.vue'), meta: { title: 'Jobs' } },
  { path: '/jobs/queue', name: 'queue', component: () => import('./pages/jobs/QueuePage.vue'), meta: { title: 'Queue' } },
  { path: '/jobs/new', name: 'job-new', component: () => import('./pages/jobs/JobEditorPage.vue'), meta: { title: 'New job' } },
  { path: '/jobs/:id(\\d+)', name: 'job', component: () => import('./pages/jobs/JobPage.vue'), props: true, meta: { title: 'Job' } },
  { path: '/jobs/:id(\\d+)/edit', name: 'job-edit', component: () => import('./pages/jobs/JobEditorPage.vue'), props: true, meta: { title: 'Edit job' } },
  { path: '/violations', name: 'violations', component: () => import('./pages/violations/ViolationsPage.vue'), meta: { title: 'Violations' } },
  { path: '/violations/:id', name: 'violation', component: () => import('./pages/violations/ViolationPage.vue'), props: true, meta: { title: 'Violation' } },
  { path: '/account', name: 'account', component: () => import('./pages/account/AccountPage.vue'), meta: { title: 'My account' } },
  { path: '/account/notifications', name: 'notifications', component: () => import('./pages/account/NotificationsPage.vue'), meta: { title: 'Notifications' } },
  { path: '/reports', name: 'reports', component: () => import('./pages/reports/ReportsPage.vue'), meta: { title: 'Reports' } },
  { path: '/admin', redirect: '/admin/users' },
  { path: '/admin/users', name: 'admin-users', component: () => import('./pages/admin/UsersPage.vue'), meta: { admin: true, title: 'Users' } },
  { path: '/admin/groups', name: 'admin-groups', component: () => import('./pages/admin/GroupsPage.vue'), meta: { admin: true, title: 'Groups' } },
  { path: '/admin/rules', name: 'admin-rules', component: () => import('./pages/admin/RulesPage.vue'), meta: { admin: true, title: 'Access rules' } },
  { path: '/admin/hosts', name: 'admin-hosts', component: () => import('./pages/admin/HostsPage.vue'), meta: { admin: true, title: 'Hosts' } },
  { path: '/admin/settings', name: 'admin-settings', component: () => import('./pages/admin/SettingsPage.vue'), meta: { admin: true, title: 'Settings' } },
  { path: '/:rest(.*)*', name: 'not-found', component: () => import('./pages/NotFoundPage.vue'), meta: { title: 'Not found' } },
]

export const router = createRouter({ history: createWebHistory(), routes })

router.beforeEach((to) => {
  if (!to.meta.public && !session.signedIn) return { name: 'login', query: { next: to.fullPath } }
  if (to.meta.admin && !session.isAdmin) return { name: 'dashboard' }
  // An admin chose the password: the person chooses their own before anything else.
  if (session.signedIn && mustChoosePassword(session.user) && !to.meta.public && to.name !== 'account') return { name: 'account' }
  if (to.name === 'login' && session.signedIn) return { name: 'dashboard' }
})

router.afterEach((to) => {
  document.title = to.meta.title ? `${to.meta.title as string} · Warden` : 'Warden'
})

"""factory_boy factories for rows that need no validation (users, tokens). Policy objects are
created through the services in fixtures, the way real data is."""

import factory
from django.contrib.auth import get_user_model


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.django.Password("pw-for-tests")


class AdminFactory(UserFactory):
    username = factory.Sequence(lambda n: f"admin{n}")
    is_staff = True
    is_superuser = True
